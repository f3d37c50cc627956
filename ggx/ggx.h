// ggx: a minimal tensor graph library.
//
// Design goals
//  - Tensors are metadata (type, shape, strides, op, sources) plus an opaque data pointer that
//    belongs to a backend: host memory for the CPU backend, device memory for CUDA/HIP.
//    Nothing in ggx dereferences tensor data; only backends do.
//  - A graph is a list of nodes in execution order. It is built once per shape (number of new
//    tokens), planned once (every intermediate gets an offset in one compute buffer, with memory
//    reused between ops whose lifetimes do not overlap) and replayed for every step. Values that
//    change per step (token ids, positions) are input tensors, never baked into the graph, so a
//    backend can capture the whole graph once (CUDA graphs) and replay it.
//  - Each op has a typed parameter struct; enums for modes; no untyped int arrays.
// Non-goals: automatic differentiation, broadcasting rules beyond what the models need.
//
// Layout convention (as in ggml): ne[0] is the innermost, contiguous dimension. An activation
// matrix of T tokens with D features has ne = {D, T}. A linear weight in Hugging Face
// orientation [N out, K in] has ne = {K, N}; MUL_MAT(W, x) with x = {K, T} gives {N, T}.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GGX_MAX_DIMS 4
#define GGX_MAX_SRC 5
#define GGX_MAX_NAME 64

// ---------------------------------------------------------------------------------------------
// Types. Append only: values are stable.
enum ggx_type {
    GGX_TYPE_F32  = 0,
    GGX_TYPE_F16  = 1,
    GGX_TYPE_BF16 = 2,
    GGX_TYPE_I32  = 3,
    GGX_TYPE_I16  = 4,
    GGX_TYPE_U8   = 5,
    // Quantized matrices: opaque, described by a ggx_qmatrix (see ggx-qmatrix.h) in tensor->extra.
    GGX_TYPE_EXL2 = 16,
    GGX_TYPE_GPTQ = 17,
    GGX_TYPE_COUNT
};

struct ggx_type_traits {
    const char * name;
    size_t       size;        // bytes per element; 0 for opaque (quantized) types
    int          is_quantized;
};
const struct ggx_type_traits * ggx_type_get_traits(enum ggx_type type);
const char * ggx_type_name(enum ggx_type type);
size_t       ggx_type_size(enum ggx_type type);

// ---------------------------------------------------------------------------------------------
// Ops. Append only.
enum ggx_op {
    GGX_OP_NONE = 0,     // leaf: weight, input or cache
    GGX_OP_GET_ROWS,     // src0 table {D, V} (f32/f16/bf16), src1 ids i32 {T}      -> f32 {D, T}
    GGX_OP_MUL_MAT,      // src0 W {K, N} (f32/f16/bf16/EXL2/GPTQ), src1 x f32 {K, T} -> f32 {N, T}
    GGX_OP_ADD,          // src0 {D, T} + src1 ({D, T} or {D} broadcast over rows)   -> f32
    GGX_OP_MUL,          // src0 {D, T} * src1 ({D, T} or {D} broadcast over rows)   -> f32
    GGX_OP_SCALE,        // src0 * p.scale.s
    GGX_OP_RMS_NORM,     // x / rms(x) per row, * src1 weight {D} if given (f32/f16/bf16)
    GGX_OP_LAYER_NORM,   // (x - mean)/std per row, * src1 weight, + src2 bias (each optional)
    GGX_OP_ROPE,         // src0 x {hd, H, T}, src1 pos i32 {T}, src2 optional freq divisors f32 {n_rot/2}
    GGX_OP_SILU,
    GGX_OP_GELU,         // tanh approximation
    GGX_OP_GLU,          // act(src0) * src1, act from p.glu.act (gated MLP)
    GGX_OP_SOFTMAX,      // per row, optional p.softmax.scale applied first
    GGX_OP_KV_STORE,     // writes src0 {hd*Hkv, T} into cache src1 {hd*Hkv, C} at rows src2 pos i32 {T};
                         // the result is src1 itself (in place), so later ops depend on the write
    GGX_OP_ATTN,         // causal attention: src0 q {hd, H, T} f32, src1 K cache {hd, Hkv, C},
                         // src2 V cache {hd, Hkv, C}, src3 pos i32 {T}; query t sees keys 0..pos[t]
                         // -> f32 {hd, H, T}. GQA: head h reads kv head h / (H / Hkv).
    GGX_OP_CPY,          // convert src0 to the result's type (same element count)
    GGX_OP_ARGMAX,       // per row of src0 {D, T} -> i32 {T}; ties go to the lowest index
    GGX_OP_SOFTCAP,      // cap * tanh(x / cap)
    GGX_OP_COUNT
};
const char * ggx_op_name(enum ggx_op op);

enum ggx_rope_mode {
    GGX_ROPE_NEOX       = 0,  // rotate halves: pairs (i, i + n_rot/2)   (HF Llama "rotate_half")
    GGX_ROPE_INTERLEAVE = 1,  // rotate adjacent pairs (2i, 2i + 1)     (GPT-J, llama2.c)
};

enum ggx_act {
    GGX_ACT_SILU = 0,
    GGX_ACT_GELU = 1,  // tanh approximation
};

// Typed op parameters. One struct per op that needs parameters.
struct ggx_params_scale   { float s; };
struct ggx_params_norm    { float eps; };
struct ggx_params_rope {
    int32_t n_rot;        // rotated dims (<= hd); the rest pass through
    int32_t mode;         // enum ggx_rope_mode
    float   theta;        // base
    float   pos_scale;    // positions are multiplied by this (linear scaling: 1/factor)
    float   attn_factor;  // sin/cos are multiplied by this (YaRN/longrope magnitude correction)
    // YaRN ramp (beta_fast/beta_slow); ext_factor 0 disables it.
    float   ext_factor;
    float   beta_fast;
    float   beta_slow;
    int32_t n_ctx_orig;
};
struct ggx_params_glu     { int32_t act; };                 // enum ggx_act
struct ggx_params_softmax { float scale; };
// softcap 0 = off; window 0 = full. non_causal 1: every query sees keys 0..pos[T-1], i.e. the
// new tokens attend to each other both ways (reproduces ExLlamaV2's SDPA fallback, which passes
// no causal mask when prefilling; only for comparisons with its outputs). Query t sees keys
// P - window + 1 .. P (0 .. P without a window), P its last visible key: pos[t], or pos[T-1] when
// non_causal, so that a window with non_causal is the same `window` keys for every query.
struct ggx_params_attn    { float scale; float softcap; int32_t window; int32_t non_causal; };
struct ggx_params_softcap { float cap; };

union ggx_op_params {
    struct ggx_params_scale   scale;
    struct ggx_params_norm    norm;
    struct ggx_params_rope    rope;
    struct ggx_params_glu     glu;
    struct ggx_params_softmax softmax;
    struct ggx_params_attn    attn;
    struct ggx_params_softcap softcap;
    uint8_t                   raw[48];
};

enum ggx_tensor_flag {
    GGX_FLAG_INPUT  = 1,   // set by the host before each compute; planner allocates it
    GGX_FLAG_OUTPUT = 2,   // read by the host after compute; never overwritten by later nodes
    GGX_FLAG_WEIGHT = 4,   // lives in a weight buffer, not planned
};

struct ggx_tensor {
    enum ggx_type type;
    int64_t       ne[GGX_MAX_DIMS];   // elements per dimension
    size_t        nb[GGX_MAX_DIMS];   // stride in bytes per dimension (0 for opaque types)
    enum ggx_op   op;
    union ggx_op_params params;
    struct ggx_tensor * src[GGX_MAX_SRC];
    struct ggx_tensor * view_src;     // set when this tensor aliases another (in-place ops, views)
    size_t        view_offs;
    int32_t       flags;
    void *        data;               // backend memory; NULL until planned / loaded
    void *        extra;              // type-specific descriptor (e.g. struct ggx_qmatrix *)
    char          name[GGX_MAX_NAME];
};

int64_t ggx_nelements(const struct ggx_tensor * t);
int64_t ggx_nrows(const struct ggx_tensor * t);      // product of ne[1..3]
size_t  ggx_nbytes(const struct ggx_tensor * t);     // 0 for opaque types
int     ggx_is_contiguous(const struct ggx_tensor * t);
void    ggx_set_name(struct ggx_tensor * t, const char * fmt, ...);

// ---------------------------------------------------------------------------------------------
// Context: owns tensor metadata (never data). Graph construction functions allocate here.
struct ggx_context;
struct ggx_context * ggx_context_new(void);
void                 ggx_context_free(struct ggx_context * ctx);

struct ggx_tensor * ggx_new_tensor(struct ggx_context * ctx, enum ggx_type type, int n_dims, const int64_t * ne);
struct ggx_tensor * ggx_new_tensor_1d(struct ggx_context * ctx, enum ggx_type type, int64_t ne0);
struct ggx_tensor * ggx_new_tensor_2d(struct ggx_context * ctx, enum ggx_type type, int64_t ne0, int64_t ne1);
struct ggx_tensor * ggx_new_tensor_3d(struct ggx_context * ctx, enum ggx_type type, int64_t ne0, int64_t ne1, int64_t ne2);
// Same data, other shape (contiguous tensors only). No copy.
struct ggx_tensor * ggx_reshape_2d(struct ggx_context * ctx, struct ggx_tensor * a, int64_t ne0, int64_t ne1);
struct ggx_tensor * ggx_reshape_3d(struct ggx_context * ctx, struct ggx_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
// Rows [row0, row0 + n) of a 2-D contiguous tensor (a view; used to take the last token's row).
struct ggx_tensor * ggx_view_rows(struct ggx_context * ctx, struct ggx_tensor * a, int64_t row0, int64_t n);

struct ggx_tensor * ggx_get_rows  (struct ggx_context * ctx, struct ggx_tensor * table, struct ggx_tensor * ids);
struct ggx_tensor * ggx_mul_mat   (struct ggx_context * ctx, struct ggx_tensor * w, struct ggx_tensor * x);
struct ggx_tensor * ggx_add       (struct ggx_context * ctx, struct ggx_tensor * a, struct ggx_tensor * b);
struct ggx_tensor * ggx_mul       (struct ggx_context * ctx, struct ggx_tensor * a, struct ggx_tensor * b);
struct ggx_tensor * ggx_scale     (struct ggx_context * ctx, struct ggx_tensor * a, float s);
struct ggx_tensor * ggx_rms_norm  (struct ggx_context * ctx, struct ggx_tensor * a, struct ggx_tensor * w, float eps);
struct ggx_tensor * ggx_layer_norm(struct ggx_context * ctx, struct ggx_tensor * a, struct ggx_tensor * w, struct ggx_tensor * b, float eps);
struct ggx_tensor * ggx_rope      (struct ggx_context * ctx, struct ggx_tensor * a, struct ggx_tensor * pos,
                                   struct ggx_tensor * freq_div, struct ggx_params_rope p);
struct ggx_tensor * ggx_silu      (struct ggx_context * ctx, struct ggx_tensor * a);
struct ggx_tensor * ggx_gelu      (struct ggx_context * ctx, struct ggx_tensor * a);
struct ggx_tensor * ggx_glu       (struct ggx_context * ctx, struct ggx_tensor * gate, struct ggx_tensor * up, enum ggx_act act);
struct ggx_tensor * ggx_softmax   (struct ggx_context * ctx, struct ggx_tensor * a, float scale);
struct ggx_tensor * ggx_kv_store  (struct ggx_context * ctx, struct ggx_tensor * cur, struct ggx_tensor * cache, struct ggx_tensor * pos);
struct ggx_tensor * ggx_attn      (struct ggx_context * ctx, struct ggx_tensor * q, struct ggx_tensor * k_cache,
                                   struct ggx_tensor * v_cache, struct ggx_tensor * pos, struct ggx_params_attn p);
struct ggx_tensor * ggx_cpy       (struct ggx_context * ctx, struct ggx_tensor * a, enum ggx_type type);
struct ggx_tensor * ggx_argmax    (struct ggx_context * ctx, struct ggx_tensor * a);
struct ggx_tensor * ggx_softcap   (struct ggx_context * ctx, struct ggx_tensor * a, float cap);

// ---------------------------------------------------------------------------------------------
// Graph: nodes in execution order (construction order is already topological).
struct ggx_graph;
struct ggx_graph *   ggx_graph_new(struct ggx_context * ctx);
// Adds `t` and every not-yet-added ancestor that is an op (leaves are not nodes).
void                 ggx_graph_build(struct ggx_graph * g, struct ggx_tensor * t);
int                  ggx_graph_n_nodes(const struct ggx_graph * g);
struct ggx_tensor *  ggx_graph_node(const struct ggx_graph * g, int i);
int                  ggx_graph_n_leafs(const struct ggx_graph * g);
struct ggx_tensor *  ggx_graph_leaf(const struct ggx_graph * g, int i);

// ---------------------------------------------------------------------------------------------
// Status codes returned by backends and the planner.
enum ggx_status {
    GGX_STATUS_OK          = 0,
    GGX_STATUS_ALLOC_FAILED = -1,  // out of (device) memory
    GGX_STATUS_UNSUPPORTED = -2,  // op/type not supported by the backend
    GGX_STATUS_FAILED      = -3,  // backend error (driver, launch)
    GGX_STATUS_ABORTED     = -4,
};

// Last error message of the calling thread (set by ggx and backends when they return an error).
const char * ggx_last_error(void);
void         ggx_set_error(const char * fmt, ...);

#ifdef __cplusplus
}
#endif

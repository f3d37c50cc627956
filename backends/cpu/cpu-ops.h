// CPU kernels: one entry per ggx op, routed to by the switch in cpu-backend.cpp.
//
// Every thread of the pool calls the kernel of each node with its own (ith, nth) and writes only
// its share of the result; the backend puts a barrier between nodes. Kernels never allocate:
// what they need beyond the tensors is this thread's scratch, sized by scratch_floats(). Bad data
// (an id or position out of range) is reported through report_error(); the kernel then writes
// zeros for that part and the graph stops after the node.
#pragma once

#include "ggx/ggx.h"

#include <atomic>
#include <cstddef>

namespace ggx_cpu {

// Errors of one graph run. Reports from node i all happen before the barrier that ends node i,
// so after that barrier every thread sees the same first_node <= i and stops together.
struct errors {
    std::atomic<int> first_node{0x7fffffff};
    std::atomic<int> has_msg{0};
    char msg[256] = {0};
};

struct params {
    int      ith, nth;
    int      node;      // index of the node in the graph (for error ordering)
    float *  scratch;   // scratch_floats(node) floats owned by this thread
    errors * err;
};

// printf-style; the first report of a graph run becomes ggx_last_error().
void report_error(const params & p, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// Scratch per thread (in floats) that the kernel of `node` needs with nth threads.
size_t scratch_floats(const ggx_tensor * node, int nth);

// Why the kernels cannot run `node` (op, types, shapes, strides), or NULL when they can.
const char * unsupported_reason(const ggx_tensor * node);

void op_get_rows  (const params & p, ggx_tensor * dst);   // cpu-copy.cpp
void op_cpy       (const params & p, ggx_tensor * dst);
void op_kv_store  (const params & p, ggx_tensor * dst);
void op_mul_mat   (const params & p, ggx_tensor * dst);   // cpu-matmul.cpp
void op_add       (const params & p, ggx_tensor * dst);   // cpu-elementwise.cpp
void op_mul       (const params & p, ggx_tensor * dst);
void op_scale     (const params & p, ggx_tensor * dst);
void op_silu      (const params & p, ggx_tensor * dst);
void op_gelu      (const params & p, ggx_tensor * dst);
void op_glu       (const params & p, ggx_tensor * dst);
void op_softcap   (const params & p, ggx_tensor * dst);
void op_softmax   (const params & p, ggx_tensor * dst);   // cpu-reduce.cpp
void op_argmax    (const params & p, ggx_tensor * dst);
void op_rms_norm  (const params & p, ggx_tensor * dst);   // cpu-norm.cpp
void op_layer_norm(const params & p, ggx_tensor * dst);
void op_rope      (const params & p, ggx_tensor * dst);   // cpu-rope.cpp
void op_attn      (const params & p, ggx_tensor * dst);   // cpu-attn.cpp

// Scratch needs of the kernels that have any (in floats per thread).
size_t rope_scratch_floats(const ggx_tensor * node);
size_t attn_scratch_floats(const ggx_tensor * node);
size_t norm_scratch_floats(const ggx_tensor * node);
size_t binary_scratch_floats(const ggx_tensor * node);

}  // namespace ggx_cpu

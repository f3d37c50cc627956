/* exl2.h: the C API of the exl2 runtime (first version).
 *
 * Loads Hugging Face model folders (fp16/bf16/fp32 safetensors, EXL2 and GPTQ quantized), runs
 * them on the CPU or a GPU, tokenizes and samples. Every object is an opaque handle with one
 * constructor and one destructor. Functions never abort the host process and never let a C++
 * exception escape: they return NULL or a negative code, and exl2_last_error() (per thread)
 * says what went wrong, naming the file, tensor, field or value.
 *
 * Usage:
 *   struct exl2_model_params mp = exl2_model_default_params();
 *   mp.device = "cuda:0";
 *   exl2_model * model = exl2_model_load("models/kjv-6m", mp);
 *   if (!model) { fprintf(stderr, "%s\n", exl2_last_error()); return 1; }
 *   struct exl2_context_params cp = exl2_context_default_params();
 *   exl2_context * ctx = exl2_context_new(model, cp);
 *   int32_t ids[256]; int n = exl2_tokenize(exl2_model_tokenizer(model), "In the beginning", -1, ids, 256, 1, 0);
 *   exl2_decode(ctx, ids, n, 0);                       // prefill, logits of the last token
 *   const float * logits = exl2_get_logits(ctx, -1);
 *   ... exl2_sampler_sample(smp, ctx, -1) ... exl2_decode(ctx, &next, 1, 0) ...
 *   exl2_context_free(ctx); exl2_model_free(model);
 */
#ifndef EXL2_H
#define EXL2_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EXL2_API_VERSION 1

/* Return codes: 0 success, negative errors. */
enum exl2_status {
    EXL2_OK                = 0,
    EXL2_ERR_INVALID_ARG   = -1,  /* bad argument (NULL handle, out of range value)            */
    EXL2_ERR_IO            = -2,  /* file missing / unreadable / truncated                     */
    EXL2_ERR_FORMAT        = -3,  /* malformed or inconsistent file content                    */
    EXL2_ERR_UNSUPPORTED   = -4,  /* architecture, dtype or feature not supported              */
    EXL2_ERR_OUT_OF_MEMORY = -5,  /* host or device allocation failed                          */
    EXL2_ERR_CONTEXT_FULL  = -6,  /* the KV cache cannot hold more tokens                      */
    EXL2_ERR_BACKEND       = -7,  /* device/driver error                                       */
    EXL2_ERR_BUFFER_SMALL  = -8,  /* output buffer too small (the needed size is returned too) */
};

/* Message for the last failed call on this thread ("" if none). Valid until the next call. */
const char * exl2_last_error(void);
const char * exl2_version(void);
/* Compiled-in backends, e.g. "cpu,cuda". */
const char * exl2_backends(void);

/* ---------------------------------------------------------------------------------------- */
/* Tokenizer                                                                                 */
typedef struct exl2_tokenizer exl2_tokenizer;

/* Loads tokenizer.json / tokenizer.model and tokenizer_config.json from a model folder. */
exl2_tokenizer * exl2_tokenizer_load(const char * dir);
void             exl2_tokenizer_free(exl2_tokenizer * tok);

/* Encodes `len` bytes of UTF-8 (len < 0: NUL-terminated). add_special: BOS/EOS and template as
 * the tokenizer's configuration says. parse_special: special-token text in the input is matched
 * as those tokens.
 * Returns the full number of ids n >= 0; only min(n, max_ids) are written, so a return value
 * above max_ids means: call again with a larger buffer. Negative: error. */
int32_t exl2_tokenize(const exl2_tokenizer * tok, const char * text, int32_t len, int32_t * ids,
                      int32_t max_ids, int add_special, int parse_special);
/* Decodes ids to UTF-8 into buf (NUL-terminated when room). Returns the full byte length (as
 * for snprintf), negative on error. skip_special: leave special tokens out. */
int32_t exl2_detokenize(const exl2_tokenizer * tok, const int32_t * ids, int32_t n_ids, char * buf,
                        int32_t buf_size, int skip_special);
/* The raw text of one token (bytes, may be an incomplete UTF-8 sequence). Same return rule. */
int32_t exl2_token_to_piece(const exl2_tokenizer * tok, int32_t id, char * buf, int32_t buf_size);
int32_t exl2_tokenizer_n_vocab(const exl2_tokenizer * tok);
int32_t exl2_tokenizer_bos(const exl2_tokenizer * tok);   /* -1 when none */
int32_t exl2_tokenizer_eos(const exl2_tokenizer * tok);   /* -1 when none */
int     exl2_tokenizer_is_special(const exl2_tokenizer * tok, int32_t id);
/* Chat template string from tokenizer_config.json, or "" (owned by tok). */
const char * exl2_tokenizer_chat_template(const exl2_tokenizer * tok);

/* Streaming decoder: feed ids one at a time, get text that is safe to print (complete UTF-8
 * characters only; invalid bytes become U+FFFD). */
typedef struct exl2_detok_stream exl2_detok_stream;
exl2_detok_stream * exl2_detok_stream_new(const exl2_tokenizer * tok, int skip_special);
void                exl2_detok_stream_free(exl2_detok_stream * s);
/* Returns a NUL-terminated string owned by the stream, valid until the next call. */
const char *        exl2_detok_stream_push(exl2_detok_stream * s, int32_t id);
/* Whatever is still held back (an incomplete character becomes U+FFFD). */
const char *        exl2_detok_stream_flush(exl2_detok_stream * s);

/* ---------------------------------------------------------------------------------------- */
/* Models                                                                                    */
typedef struct exl2_model exl2_model;

struct exl2_model_params {
    const char * device;     /* "cpu" (default), "cuda", "cuda:N", "hip", or "auto": the first  *
                              * GPU when the build has a GPU backend and it answers, else the  *
                              * CPU (exl2_model_device_note says why not the GPU)              */
    int32_t      n_threads;  /* CPU threads, 0 = all cores                                     */
    int32_t      verbose;    /* 1: print loading progress to stderr                            */
    int32_t      deterministic; /* 1: logits repeat bit for bit from run to run on a GPU (its  *
                              * sums split over blocks are added in a fixed order; decode is   *
                              * 8-15% slower on an H100). 0 (default): the fastest order,      *
                              * logits may differ in their last bits between runs. The CPU     *
                              * always repeats.                                                */
};
struct exl2_model_params exl2_model_default_params(void);

exl2_model * exl2_model_load(const char * dir, struct exl2_model_params params);
void         exl2_model_free(exl2_model * model);
/* The model's tokenizer (owned by the model; do not free). */
const exl2_tokenizer * exl2_model_tokenizer(const exl2_model * model);
int32_t      exl2_model_n_vocab(const exl2_model * model);
int32_t      exl2_model_n_ctx_train(const exl2_model * model);
int32_t      exl2_model_n_layer(const exl2_model * model);
int32_t      exl2_model_n_embd(const exl2_model * model);
/* Number of parameters, and bytes of weights read per decoded token. */
uint64_t     exl2_model_n_params(const exl2_model * model);
uint64_t     exl2_model_weight_bytes(const exl2_model * model);
/* Bytes the weights occupy on the backend: every tensor uploaded to a GPU (the embedding table
 * included); on the CPU only the quantized layers' copies (other tensors are used in place from
 * the file mapping). Backend-side tables and alignment padding are not counted. */
uint64_t     exl2_model_device_bytes(const exl2_model * model);
/* One-line description: architecture, size, quantization, device. Owned by the model. */
const char * exl2_model_desc(const exl2_model * model);
/* Why a model loaded with device "auto" is on the CPU although the build has a GPU backend (the
 * GPU's error, e.g. "cuda: no usable CUDA device (...)"); "" otherwise. Owned by the model. */
const char * exl2_model_device_note(const exl2_model * model);

/* ---------------------------------------------------------------------------------------- */
/* Contexts: a KV cache plus planned graphs. One sequence per context in this version.        */
typedef struct exl2_context exl2_context;

enum exl2_cache_type {
    EXL2_CACHE_F16 = 0,
    EXL2_CACHE_F32 = 1,
};

struct exl2_context_params {
    int32_t n_ctx;        /* KV cache length in tokens; 0 = the model's training context        */
    int32_t n_batch;      /* most tokens per decode call (prompt chunk); 0 = 512                */
    int32_t cache_type;   /* enum exl2_cache_type                                                */
    /* Greedy run-ahead: after a one-token decode, a greedy exl2_sampler_sample queues the next
     * step for the token it chose before reading that token back, so the GPU does not wait for
     * the host between tokens. Decoding that token next takes the queued step; any other decode
     * or a truncate drops it. 0 = on for GPU devices (default), 1 = on everywhere, -1 = off.    */
    int32_t run_ahead;
};
struct exl2_context_params exl2_context_default_params(void);

exl2_context * exl2_context_new(exl2_model * model, struct exl2_context_params params);
void           exl2_context_free(exl2_context * ctx);
int32_t        exl2_context_n_ctx(const exl2_context * ctx);
/* Tokens currently in the cache. */
int32_t        exl2_context_n_past(const exl2_context * ctx);
/* Drop cached tokens from position n on (0 clears). */
int            exl2_context_truncate(exl2_context * ctx, int32_t n);
/* Bytes of the KV cache, and of the compute buffer (a full batch's activations, reserved at
 * creation; it grows once when a batch first keeps every row's logits). */
uint64_t       exl2_context_cache_bytes(const exl2_context * ctx);
uint64_t       exl2_context_compute_bytes(const exl2_context * ctx);

/* Runs the model on n tokens appended after the cached ones (longer inputs are split into
 * n_batch chunks). all_logits: keep logits for every token, else only the last.
 * Returns EXL2_OK, EXL2_ERR_CONTEXT_FULL (nothing appended) or another negative code.
 * Without all_logits, a GPU may still be working when it returns: the logits stay on the
 * device until exl2_get_logits asks for them, and a greedy exl2_sampler_sample reads back
 * only the chosen id. Either call waits for the decode to finish. */
int            exl2_decode(exl2_context * ctx, const int32_t * tokens, int32_t n, int all_logits);
/* Logits of token i of the last decode call (i < 0 counts from the end). NULL when not kept
 * or when reading them from the device failed (exl2_last_error says why).
 * Owned by the context, valid until the next decode. n_vocab floats. */
const float *  exl2_get_logits(exl2_context * ctx, int32_t i);

/* ---------------------------------------------------------------------------------------- */
/* Sampling                                                                                  */
typedef struct exl2_sampler exl2_sampler;

struct exl2_sampler_params {
    float    temperature;   /* <= 0: greedy                                                     */
    int32_t  top_k;         /* 0 = off                                                          */
    float    top_p;         /* >= 1 = off                                                       */
    float    min_p;         /* 0 = off                                                          */
    float    repetition_penalty;  /* 1 = off                                                    */
    int32_t  repetition_range;    /* tokens looked back, 0 = whole history                      */
    uint64_t seed;
};
struct exl2_sampler_params exl2_sampler_default_params(void);
exl2_sampler * exl2_sampler_new(struct exl2_sampler_params params);
void           exl2_sampler_free(exl2_sampler * smp);
/* Samples from the logits of token i of the last decode (see exl2_get_logits); records the
 * choice in the sampler's history (for penalties). Returns the id or a negative code. */
int32_t        exl2_sampler_sample(exl2_sampler * smp, exl2_context * ctx, int32_t i);
/* Samples from a caller's logits array of n_vocab floats. */
int32_t        exl2_sampler_sample_logits(exl2_sampler * smp, const float * logits, int32_t n_vocab);
/* Tells the sampler about prompt tokens (for repetition penalties). */
void           exl2_sampler_accept(exl2_sampler * smp, int32_t id);

/* ---------------------------------------------------------------------------------------- */
/* Synthetic models and device facts (benchmarks)                                            */

/* Known synthetic architectures, comma separated: "llama3-8b, llama2-7b, llama3.2-1b, ...". */
const char * exl2_synthetic_names(void);
/* A random but valid EXL2 model with the real shapes of `name`, built in memory (no files, no
 * tokenizer: exl2_model_tokenizer returns NULL). bpw: target bits per weight of the decoder
 * layers, 2..8; n_layers: 0 = all layers, else the first n (a slice of a large model). The same
 * (name, bpw, n_layers, seed) always gives the same weights. NULL on error. */
exl2_model * exl2_model_load_synthetic(const char * name, float bpw, int32_t n_layers, uint64_t seed,
                                       struct exl2_model_params params);
/* Writes the same model as an EXL2 folder (config.json, output.safetensors, a minimal byte-level
 * tokenizer.json) that other engines can load. Creates `dir`; never overwrites. 0 or negative. */
int          exl2_synthetic_save(const char * name, float bpw, int32_t n_layers, uint64_t seed, const char * dir);

/* Free and total memory of a device ("cpu", "cuda:0", ..., or "auto" as for loading) in bytes. *
 * 0 or a negative code.                                                                        */
int          exl2_device_memory(const char * device, uint64_t * free_bytes, uint64_t * total_bytes);
/* Measured device-to-device copy bandwidth in bytes per second, counting bytes read plus bytes
 * written, with buffers of `bytes` each (0 = 1 GiB). Negative on error (no such device, no
 * copy support, out of memory). */
double       exl2_device_copy_bandwidth(const char * device, uint64_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* EXL2_H */

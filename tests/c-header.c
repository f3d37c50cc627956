/* The public header must compile as plain C (C99, pedantic): bindings and FFI see only this. */
#include "exl2.h"

int exl2_c_header_check(void) {
    struct exl2_model_params mp = exl2_model_default_params();
    struct exl2_context_params cp = exl2_context_default_params();
    struct exl2_sampler_params sp = exl2_sampler_default_params();
    return (int)(mp.n_threads + cp.n_ctx + sp.top_k) + EXL2_OK;
}

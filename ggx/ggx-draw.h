// The draw of a top-k sampler over probabilities already computed, shared by the host sampler
// (exl2/sampler.cpp) and the backends that draw where the logits are (ggx_backend_i::top_n_begin):
// one order of operations, so that a draw made on a device can be checked against the host's.
#pragma once

#include "ggx-backend.h"

#include <math.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GGX_DRAW_FN __host__ __device__ inline
#else
#define GGX_DRAW_FN inline
#endif

// p(i) = exp(l(i) - mx) / sum over i < n, the sum in double in order; returns the sum. l(i): the
// logits (value / temperature), p(i): a float& to write. The sampler passes its candidates and
// the row's maximum; a draw over the best (v best first) passes v[i] / t and v[0] / t.
template <class L, class P>
GGX_DRAW_FN double ggx_draw_probabilities(int n, float mx, L l, P p) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        p(i) = expf(l(i) - mx);
        sum += p(i);
    }
    for (int i = 0; i < n; i++) p(i) = (float)(p(i) / sum);
    return sum;
}

// Puts n candidates ranked as a backend ranks them (the larger value, then the lower id) into the
// host sampler's order (the larger value / t, then the lower id: exl2/sampler.cpp's by_logit).
// The orders differ only where two values divide to one quotient (1.60000014f and 1.60000026f at
// t = 0.8 both give 2.00000024f) and the larger value has the higher id: then a draw landing on
// either would take the other id. v(j): float&, id(j): int32_t&. An insertion pass: only such
// ties move (NaN compares false and stays).
template <class V, class I>
GGX_DRAW_FN void ggx_draw_order(int n, float t, V v, I id) {
    for (int a = 1; a < n; a++) {
        const float va = v(a), qa = va / t;
        const int32_t ia = id(a);
        int b = a;
        for (; b > 0; b--) {
            const float qb = v(b - 1) / t;
            if (!(qb < qa || (qb == qa && id(b - 1) > ia))) break;
            v(b) = v(b - 1);
            id(b) = id(b - 1);
        }
        v(b) = va;
        id(b) = ia;
    }
}

// Index of the candidate drawn from p(0) .. p(n - 1) (best first): min-p, top-p, then the first
// whose cumulative p exceeds u * total (the last one if rounding leaves none).
template <class P>
GGX_DRAW_FN int ggx_draw_select(P p, int n, float min_p, float top_p, double u) {
    if (min_p > 0) {
        const float thr = p(0) * min_p;
        int k = 1;
        while (k < n && p(k) >= thr) k++;
        n = k;
    }
    if (top_p > 0 && top_p < 1) {
        double cum = 0;
        int k = 0;
        while (k < n) { cum += p(k); k++; if (cum >= top_p) break; }
        n = k;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += p(i);
    const double r = u * total;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += p(i);
        if (r < acc) return i;
    }
    return n - 1;
}

// Data movement: GET_ROWS (embedding lookup), CPY (type conversion), KV_STORE (cache write).
#include "cpu-common.h"
#include "cpu-convert.h"
#include "cpu-ops.h"

namespace ggx_cpu {

void op_get_rows(const params & p, ggx_tensor * dst) {
    const ggx_tensor * tab = dst->src[0];
    const int32_t * ids = (const int32_t *)dst->src[1]->data;
    const size_t ts = ggx_type_size(tab->type);
    const int64_t n_rows_tab = tab->ne[1];
    for_each_chunk(ggx_nrows(dst), dst->ne[0], p.ith, p.nth, [&](int64_t r, int64_t c0, int64_t c1) {
        float * out = (float *)row_ptr(dst, r) + c0;
        const int32_t id = ids[r];
        if (id < 0 || id >= n_rows_tab) {
            report_error(p, "get_rows '%s': id %d at index %lld is outside table '%s' of %lld rows", dst->name, id,
                         (long long)r, tab->name, (long long)n_rows_tab);
            memset(out, 0, (size_t)(c1 - c0) * sizeof(float));
            return;
        }
        to_f32(tab->type, (const char *)tab->data + (size_t)id * tab->nb[1] + (size_t)c0 * ts, out, c1 - c0);
    });
}

void op_cpy(const params & p, ggx_tensor * dst) {
    const ggx_tensor * src = dst->src[0];
    const size_t ts_src = ggx_type_size(src->type), ts_dst = ggx_type_size(dst->type);
    for_each_chunk(ggx_nrows(dst), dst->ne[0], p.ith, p.nth, [&](int64_t r, int64_t c0, int64_t c1) {
        const char * s = row_ptr(src, r) + (size_t)c0 * ts_src;
        char * d = row_ptr(dst, r) + (size_t)c0 * ts_dst;
        if (src->type == dst->type) {
            memcpy(d, s, (size_t)(c1 - c0) * ts_src);
        } else if (src->type == GGX_TYPE_F32) {
            from_f32(dst->type, (const float *)s, d, c1 - c0);
        } else if (dst->type == GGX_TYPE_F32) {
            to_f32(src->type, s, (float *)d, c1 - c0);
        } else {
            float buf[256];   // f16 <-> bf16 through f32 (exact widening, one rounding)
            for (int64_t c = c0; c < c1; c += 256) {
                const int64_t n = std::min<int64_t>(256, c1 - c);
                to_f32(src->type, s + (size_t)(c - c0) * ts_src, buf, n);
                from_f32(dst->type, buf, d + (size_t)(c - c0) * ts_dst, n);
            }
        }
    });
}

// Token t's row of `cur` goes to cache slot pos[t]. Positions within one call must be distinct.
void op_kv_store(const params & p, ggx_tensor * dst) {
    const ggx_tensor * cur = dst->src[0];
    const ggx_tensor * pos_t = dst->src[2];
    const int32_t * pos = (const int32_t *)pos_t->data;
    const int64_t T = ggx_nelements(pos_t);
    const int64_t row = ggx_nelements(cur) / T;
    const int64_t n_slots = ggx_nelements(dst) / row;
    const size_t ts = ggx_type_size(dst->type);
    for_each_chunk(T, row, p.ith, p.nth, [&](int64_t t, int64_t c0, int64_t c1) {
        const int32_t slot = pos[t];
        if (slot < 0 || slot >= n_slots) {
            report_error(p, "kv_store '%s': position %d of token %lld is outside cache '%s' of %lld slots", dst->name,
                         slot, (long long)t, dst->src[1]->name, (long long)n_slots);
            return;
        }
        from_f32(dst->type, (const float *)cur->data + t * row + c0,
                 (char *)dst->data + ((size_t)slot * (size_t)row + (size_t)c0) * ts, c1 - c0);
    });
}

}  // namespace ggx_cpu

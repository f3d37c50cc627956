// One quantized linear layer: recognise it in a safetensors set, validate every tensor, apply
// the load-time transforms, and upload it to a backend as one ggx tensor (GGX_TYPE_EXL2 or
// GGX_TYPE_GPTQ, ne = {K, N}, extra = struct ggx_qmatrix; layouts in ggx/ggx-qmatrix.h).
//
//   exl2::SafeTensors st; st.open_dir(dir);
//   if (exl2::qlayer_detect(st, "model.layers.0.mlp.down_proj") != exl2::QFormat::NONE) {
//       exl2::QLayerHost L = exl2::qlayer_load(st, "model.layers.0.mlp.down_proj", {});
//       void * buf;
//       ggx_tensor * w = exl2::qlayer_upload(ctx, be, L, &buf);   // L may be dropped now
//       ... ggx_mul_mat(ctx, w, x); add L.bias separately ...
//       exl2::qlayer_release(be, w, buf);                          // at unload
//   }
//
// Every check failure throws exl2::Error with "<file>: <tensor>: what is wrong" (one line).
// Tensors, per docs/exl2-format.md section 2 (EXL2) and 5 (GPTQ):
//   EXL2  P.q_weight I32 [QR, Np]  P.q_scale I32 [G, Np/8]  P.q_scale_max F16 [G]
//         P.q_groups I16 [2G]       P.q_invperm I32 [K]      P.bias F16/BF16/F32 [N] (optional)
//   GPTQ  P.qweight I32 [K/8, N]    P.qzeros I32 [G, N/8]    P.scales F16/F32 [G, N]
//         P.g_idx I32 [K] (optional) P.bias (optional, dropped when all zero)
// Non-goals: AWQ, GPTQ widths other than 4 (not recorded in the tensors; see section 5).
#pragma once

#include "exl2/safetensors.h"
#include "ggx/ggx-backend.h"
#include "ggx/ggx-qmatrix.h"
#include "ggx/ggx.h"

#include <cstdint>
#include <string>
#include <vector>

namespace exl2 {

enum class QFormat { NONE, EXL2, GPTQ };

// EXL2 when P.q_weight exists, else GPTQ when P.qweight exists, else NONE (section 1.1 order).
QFormat qlayer_detect(const SafeTensors & st, const std::string & prefix);

struct QLoadOptions {
    bool  gptq_v2  = false;  // config quantization_config.checkpoint_format == "gptq_v2"
    float prescale = 1.0f;   // logit scale (head) or residual multiplier (o/down); 1 otherwise
    int   N        = 0;      // output features when known from the config (checked); 0: from the
                             // bias length when there is a bias, else the packed width
};

// Host copy of a layer after the load-time transforms; the sub-buffers are in exactly the
// layout ggx_qmatrix describes.
struct QLayerHost {
    QFormat     format = QFormat::NONE;
    std::string name;             // key prefix P
    int K = 0, N = 0, Np = 0;     // Np: N padded to 32 (EXL2); == N (GPTQ)
    int G = 0, QR = 0;            // groups; rows of q_weight
    int rows_per_width[GGX_EXL2_N_WIDTHS] = {};  // EXL2, in ggx_exl2_widths order
    int group_size = 0;           // GPTQ
    float prescale = 1.0f;

    std::vector<uint32_t> q_weight;     // EXL2 [QR][Np]; GPTQ [K/8][N], rows sorted by group
    std::vector<uint32_t> q_scale;      // EXL2 [G][Np/8]
    std::vector<uint16_t> q_scale_max;  // EXL2 [G] fp16 M'_g = h(M_g * prescale/256)
    std::vector<uint16_t> q_groups;     // EXL2 [2G]
    std::vector<int32_t>  q_perm;       // [K] quantized/sorted row -> original row;
                                        // always set for EXL2, empty for GPTQ without act-order
    std::vector<uint32_t> qzeros;       // GPTQ [G][N/8], "zero - 1" (v2 already converted)
    std::vector<uint16_t> scales;       // GPTQ [G][N] fp16, multiplied by prescale
    std::vector<float>    bias;         // [N] (values fp16-exact, as ExLlamaV2 holds them) or empty
};

// Loads and validates the layer at `prefix`. Throws exl2::Error naming the tensor on any defect,
// and when the prefix holds no quantized layer.
QLayerHost qlayer_load(const SafeTensors & st, const std::string & prefix, const QLoadOptions & opt = {});

// A descriptor whose pointers point into L's vectors (host memory, valid while L lives), for
// host-side kernels and tests that do not go through a backend.
ggx_qmatrix qlayer_host_view(const QLayerHost & L);

// Uploads L into ONE backend buffer (sub-buffers aligned to max(be->alignment, 64)), creates the
// tensor in ctx, and calls be->iface.qmatrix_prepare when present. *out_buffer receives the
// backend allocation. The tensor's extra (a heap ggx_qmatrix, with its own host copy of q_groups)
// is owned by the caller: free it with qlayer_release. Throws exl2::Error on backend failure.
ggx_tensor * qlayer_upload(ggx_context * ctx, ggx_backend * be, const QLayerHost & L, void ** out_buffer);
// Undoes qlayer_upload: qmatrix_release (if any), frees extra, deallocates the buffer.
void qlayer_release(ggx_backend * be, ggx_tensor * t, void * buffer);

// Bytes a matmul reads from the layer's sub-buffers (packed weights, scales, groups, perm):
// the numerator of a bandwidth figure.
size_t qmatrix_bytes_read(const ggx_qmatrix & qm, enum ggx_type type);
size_t qlayer_bytes_read(const QLayerHost & L);
// Bits per weight as stored (docs section 6.8 for EXL2, including scales, groups, perm and bias;
// for GPTQ all stored tensors over K*N).
double qlayer_bpw(const QLayerHost & L);

}  // namespace exl2

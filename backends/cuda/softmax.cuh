// SOFTMAX (optional pre-scale) and ARGMAX (ties to the lowest index) over rows of ne0 elements.
#pragma once

#include "common.cuh"

enum ggx_status ggx_cuda_op_softmax(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
enum ggx_status ggx_cuda_op_argmax(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);

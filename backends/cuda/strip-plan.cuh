// The backend's use of the strip step (strip-step.h), switched on by GGX_CUDA_STEP=1, and of the
// tile step (tile-step.h: the same frame around the tensor-core tile loop) by GGX_CUDA_STEP=tile
// (both experimental): EXL2 matrices get a strip-layout copy of their words at load, and runs of
// consecutive one-row decode jobs (a layer's o, gate/up and down, then the head; the tile step
// also the next layer's q/k/v with their RoPE and cache stores) run as one persistent launch
// instead of one launch per job.
//
// The copy doubles the memory of the matrices that get it (the prefill and multi-row paths still
// read the stored layout), which is why it is not on by default.
#pragma once

#include "common.cuh"
#include "decode-plan.h"

// Builds the strip layout of EXL2 tensor t on the device (q_weight already there; `groups` is
// the host copy of q_groups) and records it in the tensor's ggx_cuda_qextra. A matrix the layout
// does not take (16-row groups, K not a multiple of 32) is left without one: its jobs keep the
// ordinary kernels.
enum ggx_status ggx_cuda_strip_prepare(ggx_cuda_ctx & ctx, struct ggx_tensor * t, const std::vector<uint16_t> & groups);
void            ggx_cuda_strip_release(ggx_cuda_qextra * e);

// The same for the tile step (GGX_CUDA_STEP=tile, tile-step.h): the tile layout of t, its words
// gathered on the device from q_weight, dealt for one block per SM. A matrix the layout does not
// take (groups not of whole 16-row steps, K over 65536) is left without one.
enum ggx_status ggx_cuda_tile_prepare(ggx_cuda_ctx & ctx, struct ggx_tensor * t, const std::vector<uint16_t> & groups);
void            ggx_cuda_tile_release(ggx_cuda_qextra * e);
// Before a graph with `job` is captured (tile step only): a q/k/v job's matrices get their tile
// copies rebuilt where needed for a split stage (tile-step.h): each dealt to its share of the
// grid, q and k in RoPE pair order. Others are left as they are.
enum ggx_status ggx_cuda_tile_fit(ggx_cuda_ctx & ctx, const ggx_qgemv_job & job);

// Whether a decode job can be a stage of the step (the strip step, or the tile step when
// ctx.step_tile).
bool            ggx_cuda_strip_job_ok(const ggx_cuda_ctx & ctx, const ggx_qgemv_job & job);
// Runs jobs[0 .. n - 1] (each ggx_cuda_strip_job_ok, consecutive in the plan) as one launch of
// the strip step, or of the tile step when ctx.step_tile.
enum ggx_status ggx_cuda_strip_run(ggx_cuda_ctx & ctx, const ggx_qgemv_job * const * jobs, int n);

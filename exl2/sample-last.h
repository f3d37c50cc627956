// The next token from the last row of a context's last decode, as exl2_sampler_sample chooses it.
#pragma once

#include "context.h"
#include "sampler.h"

namespace exl2 {

// Greedy: the argmax where the logits are (greedy run-ahead, Context::greedy_last). A top-k
// sampler: a draw from the best candidates ranked where the logits are, the next step queued
// with the device's own draw when the context runs ahead (Context::sample_ahead); exactly the
// whole row's draw either way. Otherwise, or when the candidates do not decide, the host sampler
// over the whole row. Records the choice in the sampler's history.
int32_t sample_last(Context & c, Sampler & s);

}  // namespace exl2

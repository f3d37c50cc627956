// Shared between the C API implementation files (exl2/api-*.cpp); not part of the public API.
#pragma once

#include "exl2.h"
#include "model.h"

#include <memory>

// The internal form of the public model parameters.
exl2::ModelParams exl2_model_params_internal(const struct exl2_model_params & params);

// Wraps a loaded model in a C handle; takes ownership of both (tok may be NULL). NULL on OOM.
exl2_model * exl2_model_from_internal(std::unique_ptr<exl2::Model> m, exl2_tokenizer * tok);

// Error reporting at the C API boundary, shared by every exl2/api-*.cpp file.
//
//   exl2_model * exl2_model_load(...) {
//       try { ... return h; }
//       catch (...) { exl2_api_status_from_exception(); return nullptr; }
//   }
//
// The message is kept per thread and read back with exl2_last_error().
#pragma once

// Records `msg` as this thread's last error (NULL records "").
void exl2_api_set_error(const char * msg);

// Call only inside a catch block: records the current exception's message and returns the
// matching negative exl2_status (std::bad_alloc -> EXL2_ERR_OUT_OF_MEMORY; exl2::Error -> IO for
// files that cannot be opened or read, UNSUPPORTED for "not supported", else FORMAT;
// std::invalid_argument / std::out_of_range -> INVALID_ARG; anything else -> FORMAT).
int exl2_api_status_from_exception();

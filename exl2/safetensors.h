// safetensors reading (memory-mapped, every *.safetensors shard of a folder) and writing.
//
// File layout: u64 little-endian header length L, L bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then data;
// offsets are relative to byte 8 + L. Every shard in a folder is indexed; when
// model.safetensors.index.json exists, the shards it names must exist and hold the tensors it
// lists. Errors name the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace exl2 {

enum class StDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, UNKNOWN };
const char * st_dtype_name(StDtype t);
size_t       st_dtype_size(StDtype t);
StDtype      st_dtype_from_name(const std::string & s);   // UNKNOWN when not recognised

struct StTensor {
    std::string          name;
    StDtype              dtype = StDtype::UNKNOWN;
    std::vector<int64_t> shape;    // as stored (row-major, outermost first)
    const uint8_t *      data = nullptr;
    size_t               nbytes = 0;
    std::string          file;     // shard path, or "(memory)"

    int64_t numel() const;
    // "[4096, 11008]"
    std::string shape_str() const;
};

class SafeTensors {
public:
    SafeTensors();
    ~SafeTensors();
    SafeTensors(const SafeTensors &) = delete;
    SafeTensors & operator=(const SafeTensors &) = delete;

    // Index every *.safetensors file of `dir` (throws Error when there is none, or a file is
    // truncated, or its header is malformed).
    void open_dir(const std::string & dir);
    // Index one file.
    void open_file(const std::string & path);
    // Add an in-memory tensor (synthetic models, tests). The data is owned by this object.
    void add(const std::string & name, StDtype dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

    const StTensor * find(const std::string & name) const;   // nullptr when absent
    const StTensor & get(const std::string & name) const;    // throws "tensor X not found in DIR"
    bool has(const std::string & name) const { return find(name) != nullptr; }
    const std::map<std::string, StTensor> & tensors() const { return tensors_; }
    const std::string & where() const { return where_; }     // folder or file, for messages
    size_t total_bytes() const;

private:
    struct Mapping;
    std::vector<std::unique_ptr<Mapping>> maps_;
    std::vector<std::unique_ptr<std::vector<uint8_t>>> owned_;
    std::map<std::string, StTensor> tensors_;
    std::string where_;
};

// Writes tensors to one file (header sorted by name, data 8-byte aligned in header order).
// Refuses to overwrite an existing file unless `overwrite` is set.
struct StWriteTensor {
    std::string          name;
    StDtype              dtype;
    std::vector<int64_t> shape;
    const void *         data;
    size_t               nbytes;
};
void safetensors_write(const std::string & path, const std::vector<StWriteTensor> & tensors,
                       const std::map<std::string, std::string> & metadata = {}, bool overwrite = false);

}  // namespace exl2

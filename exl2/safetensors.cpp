#include "safetensors.h"
#include "error.h"
#include "json.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace exl2 {

static const struct { StDtype t; const char * name; size_t size; } k_dtypes[] = {
    {StDtype::F64, "F64", 8},   {StDtype::F32, "F32", 4},   {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8},   {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},   {StDtype::I8, "I8", 1},     {StDtype::U8, "U8", 1},
    {StDtype::BOOL, "BOOL", 1}, {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
};

const char * st_dtype_name(StDtype t) {
    for (const auto & d : k_dtypes) if (d.t == t) return d.name;
    return "UNKNOWN";
}
size_t st_dtype_size(StDtype t) {
    for (const auto & d : k_dtypes) if (d.t == t) return d.size;
    return 0;
}
StDtype st_dtype_from_name(const std::string & s) {
    for (const auto & d : k_dtypes) if (s == d.name) return d.t;
    return StDtype::UNKNOWN;
}

int64_t StTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}
std::string StTensor::shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

struct SafeTensors::Mapping {
    void * addr = nullptr;
    size_t size = 0;
    ~Mapping() {
        if (addr && addr != MAP_FAILED) munmap(addr, size);
    }
};

SafeTensors::SafeTensors() = default;
SafeTensors::~SafeTensors() = default;

static bool ends_with(const std::string & s, const std::string & suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void SafeTensors::open_file(const std::string & path) {
    if (where_.empty()) where_ = path;
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("%s: cannot open: %s", path.c_str(), strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { ::close(fd); fail("%s: cannot stat: %s", path.c_str(), strerror(errno)); }
    const size_t size = (size_t)st.st_size;
    if (size < 8) { ::close(fd); fail("%s: truncated safetensors file (%zu bytes, no header)", path.c_str(), size); }
    auto m = std::make_unique<Mapping>();
    m->addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m->addr == MAP_FAILED) { m->addr = nullptr; fail("%s: mmap failed: %s", path.c_str(), strerror(errno)); }
    m->size = size;
    const uint8_t * base = (const uint8_t *)m->addr;
    uint64_t hlen = 0;
    memcpy(&hlen, base, 8);
    if (hlen > size - 8) fail("%s: truncated safetensors file (header of %llu bytes, file of %zu)", path.c_str(), (unsigned long long)hlen, size);
    Json header = Json::parse((const char *)base + 8, (size_t)hlen, path + " (safetensors header)");
    if (!header.is_object()) fail("%s: safetensors header is not a JSON object", path.c_str());
    const uint8_t * data = base + 8 + hlen;
    const size_t data_size = size - 8 - (size_t)hlen;
    for (const auto & kv : header.as_object()) {
        if (kv.first == "__metadata__") continue;
        const Json & e = kv.second;
        const char * name = kv.first.c_str();
        if (!e.is_object()) fail("%s: tensor %s: header entry is not an object", path.c_str(), name);
        StTensor t;
        t.name = kv.first;
        t.file = path;
        const Json & dt = e.get("dtype");
        if (!dt.is_string()) fail("%s: tensor %s: missing dtype", path.c_str(), name);
        t.dtype = st_dtype_from_name(dt.as_string());
        if (t.dtype == StDtype::UNKNOWN) fail("%s: tensor %s: unknown dtype %s", path.c_str(), name, dt.as_string().c_str());
        const Json & shape = e.get("shape");
        if (!shape.is_array()) fail("%s: tensor %s: missing shape", path.c_str(), name);
        for (const Json & d : shape.as_array()) {
            if (!d.is_integer() || d.as_int() < 0) fail("%s: tensor %s: bad shape entry", path.c_str(), name);
            t.shape.push_back(d.as_int());
        }
        const Json & offs = e.get("data_offsets");
        if (!offs.is_array() || offs.size() != 2 || !offs[0].is_integer() || !offs[1].is_integer())
            fail("%s: tensor %s: bad data_offsets", path.c_str(), name);
        const int64_t b = offs[0].as_int(), en = offs[1].as_int();
        if (b < 0 || en < b) fail("%s: tensor %s: bad data_offsets [%lld, %lld]", path.c_str(), name, (long long)b, (long long)en);
        if ((uint64_t)en > data_size)
            fail("%s: truncated: tensor %s needs bytes up to %lld, file has %zu data bytes", path.c_str(), name, (long long)en, data_size);
        t.nbytes = (size_t)(en - b);
        if ((size_t)t.numel() * st_dtype_size(t.dtype) != t.nbytes)
            fail("%s: tensor %s: shape %s of %s needs %zu bytes, data_offsets give %zu", path.c_str(), name,
                 t.shape_str().c_str(), st_dtype_name(t.dtype), (size_t)t.numel() * st_dtype_size(t.dtype), t.nbytes);
        t.data = data + b;
        if (tensors_.count(t.name)) fail("%s: tensor %s also appears in %s", path.c_str(), name, tensors_[t.name].file.c_str());
        tensors_[t.name] = std::move(t);
    }
    maps_.push_back(std::move(m));
}

void SafeTensors::open_dir(const std::string & dir) {
    where_ = dir;
    DIR * d = opendir(dir.c_str());
    if (!d) fail("%s: cannot open model folder: %s", dir.c_str(), strerror(errno));
    std::vector<std::string> files;
    while (dirent * e = readdir(d)) {
        std::string n = e->d_name;
        if (ends_with(n, ".safetensors")) files.push_back(n);
    }
    closedir(d);
    std::sort(files.begin(), files.end());
    if (files.empty()) fail("%s: no *.safetensors files in the model folder", dir.c_str());
    for (const std::string & f : files) open_file(dir + "/" + f);
    // The index, when present, must agree with the shards (a missing shard is a clear error).
    const std::string index_path = dir + "/model.safetensors.index.json";
    struct stat st;
    if (stat(index_path.c_str(), &st) == 0) {
        Json idx = Json::parse_file(index_path);
        const Json & wm = idx.get("weight_map");
        if (!wm.is_object()) fail("%s: missing \"weight_map\" object", index_path.c_str());
        for (const auto & kv : wm.as_object()) {
            if (!kv.second.is_string()) fail("%s: weight_map[\"%s\"] is not a string", index_path.c_str(), kv.first.c_str());
            if (!tensors_.count(kv.first)) {
                const std::string shard = dir + "/" + kv.second.as_string();
                if (stat(shard.c_str(), &st) != 0)
                    fail("%s: shard %s named for tensor %s is missing", index_path.c_str(), kv.second.as_string().c_str(), kv.first.c_str());
                fail("%s: tensor %s is not in shard %s", index_path.c_str(), kv.first.c_str(), kv.second.as_string().c_str());
            }
        }
    }
}

void SafeTensors::add(const std::string & name, StDtype dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    if (where_.empty()) where_ = "(memory)";
    StTensor t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    if ((size_t)t.numel() * st_dtype_size(dtype) != bytes.size())
        fail("tensor %s: shape %s of %s needs %zu bytes, got %zu", name.c_str(), t.shape_str().c_str(), st_dtype_name(dtype),
             (size_t)t.numel() * st_dtype_size(dtype), bytes.size());
    owned_.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
    t.data = owned_.back()->data();
    t.nbytes = owned_.back()->size();
    t.file = "(memory)";
    tensors_[name] = std::move(t);
}

const StTensor * SafeTensors::find(const std::string & name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}
const StTensor & SafeTensors::get(const std::string & name) const {
    const StTensor * t = find(name);
    if (!t) fail("%s: tensor %s not found", where_.c_str(), name.c_str());
    return *t;
}
size_t SafeTensors::total_bytes() const {
    size_t n = 0;
    for (const auto & kv : tensors_) n += kv.second.nbytes;
    return n;
}

void safetensors_write(const std::string & path, const std::vector<StWriteTensor> & tensors,
                       const std::map<std::string, std::string> & metadata, bool overwrite) {
    struct stat st;
    if (!overwrite && stat(path.c_str(), &st) == 0) fail("%s: file exists (refusing to overwrite)", path.c_str());
    std::vector<const StWriteTensor *> order;
    for (const auto & t : tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const StWriteTensor * a, const StWriteTensor * b) { return a->name < b->name; });
    Json header = Json::make_object();
    if (!metadata.empty()) {
        Json md = Json::make_object();
        for (const auto & kv : metadata) md.set(kv.first, Json::make_string(kv.second));
        header.set("__metadata__", std::move(md));
    }
    size_t offs = 0;
    std::vector<size_t> begins;
    for (const StWriteTensor * t : order) {
        size_t need = st_dtype_size(t->dtype);
        for (int64_t d : t->shape) need *= (size_t)d;
        if (need != t->nbytes) fail("%s: tensor %s: shape and byte count disagree", path.c_str(), t->name.c_str());
        Json e = Json::make_object();
        e.set("dtype", Json::make_string(st_dtype_name(t->dtype)));
        Json sh = Json::make_array();
        for (int64_t d : t->shape) sh.push_back(Json::make_int(d));
        e.set("shape", std::move(sh));
        Json o = Json::make_array();
        o.push_back(Json::make_int((int64_t)offs));
        o.push_back(Json::make_int((int64_t)(offs + t->nbytes)));
        e.set("data_offsets", std::move(o));
        header.set(t->name, std::move(e));
        begins.push_back(offs);
        offs += t->nbytes;
    }
    std::string h = header.dump();
    while ((8 + h.size()) % 8) h += ' ';   // data starts 8-byte aligned
    const std::string tmp = path + ".tmp";
    FILE * f = fopen(tmp.c_str(), "wb");
    if (!f) fail("%s: cannot create: %s", tmp.c_str(), strerror(errno));
    uint64_t hl = h.size();
    bool ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(h.data(), 1, h.size(), f) == h.size();
    for (size_t i = 0; ok && i < order.size(); i++)
        ok = order[i]->nbytes == 0 || fwrite(order[i]->data, 1, order[i]->nbytes, f) == order[i]->nbytes;
    ok = (fclose(f) == 0) && ok;
    if (!ok) { remove(tmp.c_str()); fail("%s: write failed: %s", path.c_str(), strerror(errno)); }
    if (rename(tmp.c_str(), path.c_str()) != 0) { remove(tmp.c_str()); fail("%s: cannot rename: %s", path.c_str(), strerror(errno)); }
}

}  // namespace exl2

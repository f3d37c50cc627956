// vocab.json + merges.txt, the files GPT-2 and Qwen2 style tokenizers ship without a
// tokenizer.json; and small file helpers for the loaders.
#include "loaders.h"

#include "exl2/error.h"
#include "exl2/json.h"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace exl2 {
namespace tok {

bool file_exists(const std::string & path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("%s: cannot open", path.c_str());
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) fail("%s: read error", path.c_str());
    return ss.str();
}

std::unordered_map<std::string, int32_t> read_vocab_json(const std::string & path) {
    Json j = Json::parse_file(path);
    if (!j.is_object()) fail("%s: expected an object of token -> id", path.c_str());
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(j.size());
    for (auto & kv : j.as_object()) {
        if (!kv.second.is_integer() || kv.second.as_int() < 0 || kv.second.as_int() > INT32_MAX)
            fail("%s: token \"%s\": id must be a non-negative integer", path.c_str(), kv.first.c_str());
        vocab[kv.first] = (int32_t)kv.second.as_int();
    }
    return vocab;
}

std::vector<std::pair<std::string, std::string>> read_merges_txt(const std::string & path) {
    std::string data = read_file(path);
    std::vector<std::pair<std::string, std::string>> merges;
    size_t pos = 0, line_no = 0;
    while (pos < data.size()) {
        size_t e = data.find('\n', pos);
        if (e == std::string::npos) e = data.size();
        std::string line = data.substr(pos, e - pos);
        pos = e + 1;
        line_no++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
        size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
            fail("%s: line %zu: expected two tokens separated by one space", path.c_str(), line_no);
        merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    }
    return merges;
}

}  // namespace tok
}  // namespace exl2

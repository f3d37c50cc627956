// tokenize: the ids (or pieces) a model's tokenizer gives for a text, and an encoding benchmark.
// Uses only the C API.
#include "exl2.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

static void usage() {
    printf(
        "usage: tokenize -m DIR (-p TEXT | -f FILE) [options]\n"
        "\n"
        "Prints the token ids of a text on one line, separated by spaces.\n"
        "\n"
        "  -m, --model DIR      model folder (tokenizer.json / tokenizer.model / vocab.json + merges.txt,\n"
        "                       tokenizer_config.json)\n"
        "  -p, --prompt TEXT    text to tokenize\n"
        "  -f, --file FILE      read the text from FILE\n"
        "      --pieces         print the pieces (quoted, C escapes) instead of the ids\n"
        "      --no-bos         leave the special tokens out (no BOS/EOS template)\n"
        "      --no-parse-special  encode special-token text such as <s> as plain text\n"
        "      --bench [N]      encode the text N times (default 10) and print MB/s on one core\n"
        "  -h, --help           this help\n");
}

[[noreturn]] static void die(const std::string & msg) {
    fprintf(stderr, "tokenize: %s\n", msg.c_str());
    exit(1);
}

static bool read_file(const std::string & path, std::string & out) {
    FILE * f = fopen(path.c_str(), "rb");
    if (!f) return false;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    bool ok = !ferror(f);
    fclose(f);
    return ok;
}

static std::string quote(const std::string & s) {
    std::string q = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '\n': q += "\\n"; break;
        case '\r': q += "\\r"; break;
        case '\t': q += "\\t"; break;
        case '"': q += "\\\""; break;
        case '\\': q += "\\\\"; break;
        default:
            if (c < 0x20 || c == 0x7F) {
                char b[8];
                snprintf(b, sizeof(b), "\\x%02x", c);
                q += b;
            } else {
                q += (char)c;  // UTF-8 (and any incomplete sequence) as it is
            }
        }
    }
    return q + "\"";
}

static double thread_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_seconds() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static std::vector<int32_t> encode(const exl2_tokenizer * tok, const std::string & text, bool add_special,
                                   bool parse_special) {
    std::vector<int32_t> ids(text.size() / 2 + 16);
    int32_t n = exl2_tokenize(tok, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(),
                              add_special, parse_special);
    if (n > (int32_t)ids.size()) {
        ids.resize((size_t)n);
        n = exl2_tokenize(tok, text.data(), (int32_t)text.size(), ids.data(), n, add_special, parse_special);
    }
    if (n < 0) die(exl2_last_error());
    ids.resize((size_t)n);
    return ids;
}

int main(int argc, char ** argv) {
    std::string dir, text, file;
    bool have_text = false, pieces = false, add_special = true, parse_special = true;
    int bench = 0;
    for (int i = 1; i < argc; i++) {
        std::string f = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die("option " + f + " needs a value");
            return argv[++i];
        };
        if (f == "-h" || f == "--help") {
            usage();
            return 0;
        } else if (f == "-m" || f == "--model") {
            dir = value();
        } else if (f == "-p" || f == "--prompt") {
            text = value();
            have_text = true;
        } else if (f == "-f" || f == "--file") {
            file = value();
        } else if (f == "--pieces") {
            pieces = true;
        } else if (f == "--no-bos") {
            add_special = false;
        } else if (f == "--no-parse-special") {
            parse_special = false;
        } else if (f == "--bench") {
            bench = 10;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
                char * end = nullptr;
                errno = 0;
                long v = strtol(argv[++i], &end, 10);
                if (errno || *end || v < 1 || v > 1000000) die(std::string("--bench: bad count '") + argv[i] + "'");
                bench = (int)v;
            }
        } else {
            die("unknown option '" + f + "' (see --help)");
        }
    }
    if (dir.empty()) die("missing -m DIR (see --help)");
    if (have_text == !file.empty()) die("give exactly one of -p TEXT or -f FILE (see --help)");
    if (!file.empty() && !read_file(file, text)) die(file + ": " + strerror(errno));
    if (text.size() > (size_t)INT32_MAX) die("text longer than 2 GiB");

    exl2_tokenizer * tok = exl2_tokenizer_load(dir.c_str());
    if (!tok) die(exl2_last_error());

    if (bench > 0) {
        // CPU time of this thread: the machine may be shared. The first run starts with an empty
        // word cache (what a one-off encode of new text costs); later runs hit the cache.
        std::vector<double> cpu, wall;
        size_t n_tok = 0;
        for (int r = 0; r < bench; r++) {
            double c0 = thread_cpu_seconds(), w0 = wall_seconds();
            n_tok = encode(tok, text, add_special, parse_special).size();
            cpu.push_back(thread_cpu_seconds() - c0);
            wall.push_back(wall_seconds() - w0);
        }
        double first = cpu.front();
        std::sort(cpu.begin(), cpu.end());
        std::sort(wall.begin(), wall.end());
        double mb = text.size() / 1e6;
        printf("%.3f MB -> %zu tokens, %d runs, 1 thread, CPU time: first run %.2f MB/s, median %.2f MB/s, "
               "best %.2f MB/s (median wall %.2f MB/s)\n",
               mb, n_tok, bench, mb / first, mb / cpu[cpu.size() / 2], mb / cpu.front(), mb / wall[wall.size() / 2]);
        exl2_tokenizer_free(tok);
        return 0;
    }

    std::vector<int32_t> ids = encode(tok, text, add_special, parse_special);
    std::string line;
    std::vector<char> buf(256);
    for (size_t i = 0; i < ids.size(); i++) {
        if (i) line += ' ';
        if (!pieces) {
            line += std::to_string(ids[i]);
            continue;
        }
        int32_t n = exl2_token_to_piece(tok, ids[i], buf.data(), (int32_t)buf.size());
        if (n >= (int32_t)buf.size()) {
            buf.resize((size_t)n + 1);
            n = exl2_token_to_piece(tok, ids[i], buf.data(), (int32_t)buf.size());
        }
        if (n < 0) die(exl2_last_error());
        line += quote(std::string(buf.data(), (size_t)n));
    }
    printf("%s\n", line.c_str());
    exl2_tokenizer_free(tok);
    return 0;
}

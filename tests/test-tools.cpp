// The tools on real data, run as a user would: main's greedy text equals transformers',
// perplexity's per-token losses equal the reference ones.
#include "fixtures.h"
#include "run-tool.h"

#include "exl2/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace testfx;
using exl2::Json;

TEST_CASE("main: greedy text equals the transformers reference") {
    REQUIRE_FIXTURE(ref_path, "kjv-6m/reference.json");
    REQUIRE_TOOL("./main");
    const Json ref = Json::parse_file(ref_path);
    for (size_t i = 0; i < 3; i++) {
        const Json & r = ref.get("refs")[i];
        const std::string prompt = r.get("prompt").as_string();
        CAPTURE(prompt);
        // Single-quote the prompt for the shell.
        std::string q = "'";
        for (char c : prompt) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
        q += "'";
        Run run = run_cmd("(./main -m models/kjv-6m -p " + q + " -n 64 --temp 0 -t 2 --device cpu 2>/dev/null)");
        REQUIRE(run.status == 0);
        CHECK(run.out == r.get("greedy_text").as_string());
    }
}

TEST_CASE("main: --prompt-ids and --print-ids reproduce the reference ids") {
    REQUIRE_FIXTURE(ref_path, "kjv-6m/reference.json");
    REQUIRE_TOOL("./main");
    const Json ref = Json::parse_file(ref_path);
    const Json & r = ref.get("refs")[1];
    std::string ids, want;
    for (const Json & x : r.get("ids").as_array()) ids += std::to_string(x.as_int()) + " ";
    for (const Json & x : r.get("greedy_ids").as_array()) want += (want.empty() ? "" : " ") + std::to_string(x.as_int());
    Run run = run_cmd("(./main -m models/kjv-6m --prompt-ids '" + ids + "' -n 64 --temp 0 --print-ids --device cpu 2>/dev/null)");
    REQUIRE(run.status == 0);
    // The last line holds the ids.
    std::string out = run.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    CHECK(out.substr(out.rfind('\n') + 1) == want);
}

TEST_CASE("perplexity: per-token losses equal the reference") {
    REQUIRE_FIXTURE(ref_path, "kjv-6m/reference.json");
    REQUIRE_TOOL("./perplexity");
    const Json ref = Json::parse_file(ref_path);
    const Json & r = ref.get("refs")[3];   // the long prompt (218 tokens)
    char dir[] = "/tmp/exl2-ppl-XXXXXX";
    REQUIRE(mkdtemp(dir));
    const std::string txt = std::string(dir) + "/t.txt", nll = std::string(dir) + "/nll.txt";
    { std::ofstream f(txt, std::ios::binary); f << r.get("prompt").as_string(); }
    Run run = run_cmd("./perplexity -m models/kjv-6m -f " + txt + " -c 256 --cache f32 --device cpu --nll-out " + nll);
    CAPTURE(run.out);
    REQUIRE(run.status == 0);
    CHECK(contains(run.out, "PPL = "));
    std::ifstream f(nll);
    std::vector<double> got;
    int id;
    double v;
    while (f >> id >> v) got.push_back(v);
    const Json & want = r.get("next_token_nll");
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) worst = std::max(worst, std::fabs(got[i] - want[i].as_number()));
    // f32 compute against transformers' f32: rounding only (see test-model.cpp); 1e-3 as the issue asks.
    CHECK(worst < 1e-3);
    // The output file is never overwritten.
    Run again = run_cmd("./perplexity -m models/kjv-6m -f " + txt + " -c 256 --device cpu --nll-out " + nll);
    CHECK(again.status == 1);
    CHECK(contains(again.out, "cannot create"));
    (void)!system(("rm -rf " + std::string(dir)).c_str());
}

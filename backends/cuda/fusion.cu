// Decode fusion planning (see decode-plan.h). Host code only.
#include "decode-plan.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace {

constexpr int k_tile_cols = 512;   // qgemv.cu's column tile: RoPE needs whole heads in it

struct graph_index {
    ggx_graph * g = nullptr;
    std::unordered_map<const ggx_tensor *, int>              pos;     // node -> index
    std::unordered_map<const ggx_tensor *, std::vector<int>> users;   // tensor -> reading nodes
    const ggx_tensor * node(int i) const { return ggx_graph_node(g, i); }
};

bool is_view(const ggx_tensor * t) { return t->op == GGX_OP_NONE && t->view_src; }

// Nodes reading t, looking through views (the views passed go to `views`). False when t or one
// of its views is a graph output: then its value must be materialised.
bool readers(const graph_index & gi, const ggx_tensor * t, std::vector<int> & out, std::vector<int> & views) {
    if (t->flags & GGX_FLAG_OUTPUT) return false;
    auto it = gi.users.find(t);
    if (it == gi.users.end()) return true;
    for (int j : it->second) {
        const ggx_tensor * u = gi.node(j);
        if (is_view(u) && u->src[0] == t) {
            views.push_back(j);
            if (!readers(gi, u, out, views)) return false;
        } else if (std::find(out.begin(), out.end(), j) == out.end()) {
            out.push_back(j);
        }
    }
    return true;
}

// The only node reading t (through views), or -1.
int sole_reader(const graph_index & gi, const ggx_tensor * t, std::vector<int> & views) {
    std::vector<int> r, v;
    if (!readers(gi, t, r, v) || r.size() != 1) return -1;
    views.insert(views.end(), v.begin(), v.end());
    return r[0];
}

// s is t, or a same-size view chain of it (a reshape).
bool same_data(const ggx_tensor * s, const ggx_tensor * t) {
    while (s != t) {
        if (!is_view(s) || !s->src[0] || s->data != t->data || ggx_nelements(s) != ggx_nelements(t)) return false;
        s = s->src[0];
    }
    return true;
}

bool plain_f32(const ggx_tensor * t) { return t->type == GGX_TYPE_F32 && ggx_is_contiguous(t); }
bool float_type(ggx_type t) { return t == GGX_TYPE_F32 || t == GGX_TYPE_F16 || t == GGX_TYPE_BF16; }

struct range { const char * b; const char * e; };
range range_of(const ggx_tensor * t) {
    const char * b = (const char *)t->data;
    return {b, b + ggx_nbytes(t)};
}
bool overlap(range a, range b) { return a.b < b.e && b.b < a.e; }

struct match {
    ggx_qgemv_job_mat m;
    std::vector<int> nodes;
    int glu = -1;           // GLU node reading this matmul's result
};

// Folds the ops after the matmul at node i into its epilogue.
void match_epilogue(const graph_index & gi, int i, ggx_qgemv_job & job, match & mm) {
    ggx_tensor * cur = ggx_graph_node(gi.g, i);
    const ggx_qmatrix * q = (const ggx_qmatrix *)cur->src[0]->extra;
    const int N = q->N;
    mm.m.w = cur->src[0];
    mm.nodes.push_back(i);
    std::vector<int> views;
    int r = sole_reader(gi, cur, views);
    // bias: ADD of a weight row (a leaf, not a node)
    if (r >= 0 && views.empty()) {
        ggx_tensor * u = ggx_graph_node(gi.g, r);
        const ggx_tensor * other = u->src[0] == cur ? u->src[1] : u->src[0];
        if (u->op == GGX_OP_ADD && (u->src[0] == cur || u->src[1] == cur) && other != cur && !gi.pos.count(other) &&
            plain_f32(other) && ggx_nelements(other) == N && plain_f32(u)) {
            mm.m.bias = other;
            mm.nodes.push_back(r);
            cur = u;
            views.clear();
            r = sole_reader(gi, cur, views);
        }
    }
    mm.m.out = cur;
    if (r < 0) return;
    ggx_tensor * u = ggx_graph_node(gi.g, r);
    auto take = [&](ggx_tensor * t, int idx) {
        mm.nodes.insert(mm.nodes.end(), views.begin(), views.end());
        mm.nodes.push_back(idx);
        views.clear();
        cur = t;
        mm.m.out = t;
    };
    auto kv_ok = [&](const ggx_tensor * kv) {
        const ggx_tensor * cache = kv->src[1];
        const ggx_tensor * pos = kv->src[2];
        if (!ggx_cuda_supports_rows(kv) || !ggx_is_contiguous(cache) || cache->ne[0] != N) return false;
        if (job.pos && job.pos != pos) return false;
        return true;
    };
    if (u->op == GGX_OP_ROPE && same_data(u->src[0], cur) && ggx_cuda_supports_rope(u) && plain_f32(u)) {
        const ggx_params_rope & p = u->params.rope;
        const int hd = (int)u->src[0]->ne[0];
        const bool same_as_job = !job.head_dim || (job.head_dim == hd && job.pos == u->src[1] &&
                                                   job.freq_div == u->src[2] && !memcmp(&job.rope, &p, sizeof p));
        if (hd > 0 && k_tile_cols % hd == 0 && same_as_job && (!job.pos || job.pos == u->src[1])) {
            job.head_dim = hd;
            job.rope = p;
            job.pos = u->src[1];
            job.freq_div = u->src[2];
            mm.m.rope = true;
            take(u, r);
            r = sole_reader(gi, cur, views);
            if (r < 0) return;
            u = ggx_graph_node(gi.g, r);
        } else {
            return;
        }
    }
    if (u->op == GGX_OP_KV_STORE && same_data(u->src[0], cur) && kv_ok(u)) {
        job.pos = u->src[2];
        mm.nodes.insert(mm.nodes.end(), views.begin(), views.end());
        mm.nodes.push_back(r);
        mm.m.cache = u->src[1];
        mm.m.out = nullptr;
        return;
    }
    if (mm.m.rope || !views.empty()) return;
    if (u->op == GGX_OP_ADD && (u->src[0] == cur) != (u->src[1] == cur) && plain_f32(u)) {
        const ggx_tensor * other = u->src[0] == cur ? u->src[1] : u->src[0];
        if (plain_f32(other) && ggx_nelements(other) == ggx_nelements(cur)) {
            mm.m.resid = other;
            mm.m.epi = GGX_QGEMV_ADD;
            take(u, r);
        }
        return;
    }
    if (u->op == GGX_OP_GLU && (u->src[0] == cur) != (u->src[1] == cur) && plain_f32(u) &&
        (u->params.glu.act == GGX_ACT_SILU || u->params.glu.act == GGX_ACT_GELU)) {
        mm.glu = r;
        mm.m.is_gate = u->src[0] == cur;
    }
}

// Is the job safe to run at node p (see fusion.cuh)? `members` are the nodes it replaces.
bool job_is_safe(const graph_index & gi, const ggx_qgemv_job & job, int p, const std::vector<int> & members) {
    std::vector<range> w, rd;
    for (int i = 0; i < job.n_mat; i++)
        if (!(job.m[i].epi == GGX_QGEMV_GLU && !job.m[i].is_gate))   // a GLU pair writes one result
            w.push_back(range_of(job.m[i].cache ? job.m[i].cache : job.m[i].out));
    auto add_read = [&](const ggx_tensor * t) { if (t) rd.push_back(range_of(t)); };
    add_read(job.x);
    add_read(job.norm_w);
    add_read(job.pos);
    add_read(job.freq_div);
    for (int i = 0; i < job.n_mat; i++) {
        add_read(job.m[i].bias);
        const ggx_tensor * res = job.m[i].resid;
        if (!res) continue;
        // the residual must be final when the job runs
        auto it = gi.pos.find(res->view_src ? res->view_src : res);
        if (it != gi.pos.end() && it->second >= p) return false;
        const range rr = range_of(res), ro = range_of(job.m[i].out);
        if (!(rr.b == ro.b && rr.e == ro.e)) rd.push_back(rr);   // in place on the same elements is fine
    }
    for (size_t a = 0; a < w.size(); a++) {
        for (size_t b = a + 1; b < w.size(); b++)
            if (overlap(w[a], w[b])) return false;
        for (const range & r : rd)
            if (overlap(w[a], r)) return false;
    }
    const int lo = *std::min_element(members.begin(), members.end());
    const int hi = *std::max_element(members.begin(), members.end());
    for (int j = lo; j <= hi; j++) {
        if (std::find(members.begin(), members.end(), j) != members.end()) continue;
        const ggx_tensor * n = gi.node(j);
        if (n->op == GGX_OP_NONE) continue;
        const range dn = range_of(n);
        if (j < p) {   // runs before the job: must not overwrite what the job reads
            for (const range & r : rd)
                if (overlap(dn, r)) return false;
            continue;
        }
        for (const range & r : w)   // runs after the job: must not touch what it wrote early
            if (overlap(dn, r)) return false;
        for (const ggx_tensor * s : n->src)
            if (s)
                for (const range & r : w)
                    if (overlap(range_of(s), r)) return false;
    }
    return true;
}

// Residual adds whose sum the RMS norm right after them reads (prefill: each layer's two; decode
// folds both into its GEMV jobs instead): one kernel, one pass fewer over the rows.
void plan_add_norm(const graph_index & gi, ggx_cuda_plan & plan) {
    const int n = ggx_graph_n_nodes(gi.g);
    for (int i = 0; i < n; i++) {
        if (plan.action[i] != ggx_cuda_plan::RUN || gi.node(i)->op != GGX_OP_ADD) continue;
        int j = i + 1;
        while (j < n && gi.node(j)->op == GGX_OP_NONE) j++;
        if (j == n || plan.action[j] != ggx_cuda_plan::RUN || !ggx_cuda_add_rms_norm_ok(gi.node(i), gi.node(j))) continue;
        plan.add_norm[i] = j;
        plan.action[j] = ggx_cuda_plan::SKIP;
    }
}

bool is_decode_matmul(const ggx_tensor * n) { return n->op == GGX_OP_MUL_MAT && ggx_cuda_qgemv_supports(n); }

// Producers whose fp32 result only the prefill matmuls right after them read (see
// ggx_cuda_plan::x16_out): in a Llama graph the attention norm (q, k, v), the attention (o,
// through its reshape), the FFN norm (gate, up), the GLU (down) and the final norm (the head).
// Only nodes that leave the fp16 x alone (ggx_cuda_keeps_x16: views, RoPE, cache stores) may run
// between the producer and its last reader.
void plan_prefill_x16(const graph_index & gi, ggx_cuda_plan & plan) {
    const int n = ggx_graph_n_nodes(gi.g);
    for (int i = 0; i < n; i++) {
        const ggx_tensor * t = gi.node(i);
        if (plan.action[i] != ggx_cuda_plan::RUN || !plain_f32(t) || !plain_f32(t->src[0])) continue;
        if (t->op == GGX_OP_GLU) {
            if (!plain_f32(t->src[1]) || (t->params.glu.act != GGX_ACT_SILU && t->params.glu.act != GGX_ACT_GELU)) continue;
        } else if (t->op == GGX_OP_RMS_NORM) {
            if (t->src[1] && (!float_type(t->src[1]->type) || ggx_nelements(t->src[1]) != t->ne[0])) continue;
        } else if (!ggx_cuda_attn_is_prefill(t)) {
            continue;
        }
        std::vector<int> r, v;
        if (!readers(gi, t, r, v) || r.empty() || v.size() > 1) continue;
        // the matmuls' x: t itself, or its one reshape (a view of all of t, nothing else reads)
        const ggx_tensor * x = t;
        if (!v.empty()) {
            const ggx_tensor * view = gi.node(v[0]);
            if (!same_data(view, t) || !ggx_is_contiguous(view)) continue;
            x = view;
        }
        bool ok = true;
        for (int j : r) {
            const ggx_tensor * u = gi.node(j);
            ok = ok && j > i && plan.action[j] == ggx_cuda_plan::RUN && ggx_cuda_qmatmul_is_prefill(u) && u->src[1] == x;
        }
        if (!ok) continue;
        const int last = *std::max_element(r.begin(), r.end());
        for (int j = i + 1; j < last && ok; j++)
            ok = ggx_cuda_keeps_x16(gi.node(j)) && (!ggx_cuda_qmatmul_is_prefill(gi.node(j)) || std::find(r.begin(), r.end(), j) != r.end());
        if (ok) plan.x16_out[i] = x;
    }
}

// A one-row q/k/v job (at node p) and the ATTN node reading its results: a q matrix (RoPE, result
// in y) and k (RoPE) and v matrices storing into f16 caches, whose results one causal ATTN node
// reads (no softcap, no window) with nothing but views and the job's own folded nodes between the
// job and that node. The node's result may not share a byte with anything the job reads or writes
// (the attention tail writes it that early).
struct qkv_attn {
    int q = -1, k = -1, v = -1;   // the job's matrices
    int node = -1;                // the ATTN node
    int H = 0, Hkv = 0;
};

bool find_qkv_attn(const graph_index & gi, const ggx_cuda_plan & plan, int p, qkv_attn & r) {
    const int n = ggx_graph_n_nodes(gi.g);
    if (plan.action[p] < 0) return false;
    const ggx_qgemv_job & job = plan.jobs[plan.action[p]];
    if (job.T != 1 || job.n_mat != 3 || job.head_dim <= 0 || !job.pos) return false;
    int qi = -1, ki = -1, vi = -1;
    for (int i = 0; i < 3; i++) {
        const ggx_qgemv_job_mat & m = job.m[i];
        if (m.epi != GGX_QGEMV_STORE) continue;
        if (m.rope && m.out && !m.cache) qi = i;
        else if (m.rope && m.cache) ki = i;
        else if (!m.rope && m.cache) vi = i;
    }
    if (qi < 0 || ki < 0 || vi < 0) return false;
    // the first node after p, past views and folded nodes: the ATTN node
    int ia = p + 1;
    while (ia < n && (plan.action[ia] == ggx_cuda_plan::SKIP || gi.node(ia)->op == GGX_OP_NONE)) ia++;
    if (ia == n) return false;
    const ggx_tensor * at = gi.node(ia);
    if (at->op != GGX_OP_ATTN || plan.action[ia] != ggx_cuda_plan::RUN) return false;
    const ggx_params_attn & ap = at->params.attn;
    const ggx_tensor * q = at->src[0], * kc = at->src[1], * vc = at->src[2];
    const ggx_tensor * kcache = job.m[ki].cache, * vcache = job.m[vi].cache;
    const int64_t hd = job.head_dim, H = q->ne[1], Hkv = kc->ne[1];
    if (ap.softcap != 0.0f || ap.window != 0 || ap.non_causal || at->src[3] != job.pos || !plain_f32(at) || !plain_f32(q) ||
        q->ne[0] != hd || q->ne[2] * q->ne[3] != 1 || !same_data(q, job.m[qi].out) || kc->ne[0] != hd || Hkv < 1 || H % Hkv)
        return false;
    if (kcache->type != GGX_TYPE_F16 || vcache->type != GGX_TYPE_F16 || kc->data != kcache->data || vc->data != vcache->data ||
        ggx_nelements(kc) != ggx_nelements(kcache) || ggx_nelements(vc) != ggx_nelements(vcache) || !ggx_is_contiguous(kc) ||
        !ggx_is_contiguous(vc) || vc->ne[0] != hd || vc->ne[1] != Hkv)
        return false;
    const ggx_qmatrix * wq = (const ggx_qmatrix *)job.m[qi].w->extra, * wk = (const ggx_qmatrix *)job.m[ki].w->extra,
                      * wv = (const ggx_qmatrix *)job.m[vi].w->extra;
    if (wq->N != H * hd || wk->N != Hkv * hd || wv->N != Hkv * hd) return false;
    const range out = range_of(at);
    for (const ggx_tensor * t : {job.x, job.norm_w, job.pos, job.freq_div, (const ggx_tensor *)kcache, (const ggx_tensor *)vcache,
                                 (const ggx_tensor *)job.m[qi].out, job.m[0].bias, job.m[1].bias, job.m[2].bias})
        if (t && overlap(range_of(t), out)) return false;
    r.q = qi;
    r.k = ki;
    r.v = vi;
    r.node = ia;
    r.H = (int)H;
    r.Hkv = (int)Hkv;
    return true;
}

// Attention in the tail of one-row q/k/v jobs (ggx_qgemv_attn; find_qkv_attn's jobs with heads of
// 64 or 128 columns).
void plan_attn_tail(const graph_index & gi, ggx_cuda_plan & plan, int bound) {
    for (int p = 0; p < ggx_graph_n_nodes(gi.g); p++) {
        qkv_attn r;
        if (!find_qkv_attn(gi, plan, p, r)) continue;
        ggx_qgemv_job & job = plan.jobs[plan.action[p]];
        if (job.head_dim != 64 && job.head_dim != 128) continue;
        ggx_tensor * at = ggx_graph_node(gi.g, r.node);
        const int rows = (int)(ggx_nelements(job.m[r.k].cache) / ((int64_t)r.Hkv * job.head_dim));
        job.attn.out = at;
        job.attn.q = r.q;
        job.attn.k = r.k;
        job.attn.v = r.v;
        job.attn.H = r.H;
        job.attn.Hkv = r.Hkv;
        job.attn.scale = at->params.attn.scale;
        job.attn.bound = std::min(std::min(bound, rows), GGX_ATTN_TAIL_MAX_KEYS);
        plan.attn_tail[r.node] = job.attn.bound;
    }
}

// The q/k/v rows (ggx_attn_rows): find_qkv_attn's jobs without the attention tail whose ATTN node
// alone reads q's result and whose kernel reads rows. The job then writes neither q's result nor
// the caches: its K-slices add their sums into the rows, and the attention kernel stores k and v
// at pos. Each job has its own rows (16-byte aligned), so that one clear per run serves all.
void plan_qkv_rows(const graph_index & gi, ggx_cuda_plan & plan) {
    for (int p = 0; p < ggx_graph_n_nodes(gi.g); p++) {
        qkv_attn r;
        if (!find_qkv_attn(gi, plan, p, r)) continue;
        ggx_qgemv_job & job = plan.jobs[plan.action[p]];
        std::vector<int> views;
        if (job.attn.bound > 0 || !ggx_cuda_attn_reads_rows(gi.node(r.node)) || sole_reader(gi, job.m[r.q].out, views) != r.node)
            continue;
        ggx_attn_rows & ar = plan.attn_rows[r.node];
        for (int i : {r.q, r.k, r.v}) {
            job.m[i].rows = plan.rows_floats;
            (i == r.q ? ar.q : i == r.k ? ar.k : ar.v) = plan.rows_floats;
            plan.rows_floats += (((const ggx_qmatrix *)job.m[i].w->extra)->N + 3) / 4 * 4;
        }
    }
}

}  // namespace

void ggx_cuda_plan_graph(bool fuse, ggx_graph * g, ggx_cuda_plan & plan, int attn_tail, bool qkv_rows) {
    const int n = ggx_graph_n_nodes(g);
    plan.action.assign(n, ggx_cuda_plan::RUN);
    plan.jobs.clear();
    plan.x16_out.assign(n, nullptr);
    plan.add_norm.assign(n, -1);
    plan.attn_tail.assign(n, 0);
    plan.attn_rows.assign(n, ggx_attn_rows());
    plan.rows_floats = 0;
    if (!fuse) return;
    graph_index gi;
    gi.g = g;
    for (int i = 0; i < n; i++) {
        const ggx_tensor * t = ggx_graph_node(g, i);
        gi.pos[t] = i;
        for (const ggx_tensor * s : t->src)
            if (s) {
                std::vector<int> & u = gi.users[s];
                if (u.empty() || u.back() != i) u.push_back(i);
            }
    }
    std::vector<bool> taken(n, false);
    for (int i = 0; i < n; i++) {
        const ggx_tensor * first = ggx_graph_node(g, i);
        if (taken[i] || !is_decode_matmul(first)) continue;
        // matmuls reading the same input
        std::vector<int> group = {i};
        for (int j = i + 1; j < n && (int)group.size() < GGX_QGEMV_MAX_MATS; j++) {
            const ggx_tensor * t = ggx_graph_node(g, j);
            if (!taken[j] && is_decode_matmul(t) && t->src[1] == first->src[1]) group.push_back(j);
        }
        ggx_qgemv_job job;
        job.T = (int)ggx_nrows(first->src[1]);
        job.x = first->src[1];
        std::vector<match> ms(group.size());
        for (size_t k = 0; k < group.size(); k++) match_epilogue(gi, group[k], job, ms[k]);
        // GLU pairs inside the group
        for (size_t a = 0; a < ms.size(); a++) {
            if (ms[a].glu < 0 || ms[a].m.epi == GGX_QGEMV_GLU) continue;
            for (size_t b = a + 1; b < ms.size(); b++) {
                if (ms[b].glu != ms[a].glu || ms[b].m.is_gate == ms[a].m.is_gate) continue;
                const ggx_qmatrix * qa = (const ggx_qmatrix *)ms[a].m.w->extra;
                const ggx_qmatrix * qb = (const ggx_qmatrix *)ms[b].m.w->extra;
                if (qa->N != qb->N || qa->Np != qb->Np) continue;
                ggx_tensor * glu = ggx_graph_node(g, ms[a].glu);
                for (match * m : {&ms[a], &ms[b]}) {
                    m->m.epi = GGX_QGEMV_GLU;
                    m->m.out = glu;
                }
                ms[a].m.pair = (int)b;
                ms[b].m.pair = (int)a;
                job.act = glu->params.glu.act;
                ms[a].nodes.push_back(ms[a].glu);
                break;
            }
        }
        std::vector<int> members;
        job.n_mat = (int)ms.size();
        for (size_t k = 0; k < ms.size(); k++) {
            job.m[k] = ms[k].m;
            members.insert(members.end(), ms[k].nodes.begin(), ms[k].nodes.end());
        }
        // the RMS norm producing the shared input, when only these matmuls read it
        const ggx_tensor * x = first->src[1];
        auto xi = gi.pos.find(x);
        if (x->op == GGX_OP_RMS_NORM && xi != gi.pos.end() && plain_f32(x->src[0]) &&
            ggx_nelements(x->src[0]) == ggx_nelements(x) &&
            (!x->src[1] || (float_type(x->src[1]->type) && ggx_nelements(x->src[1]) == x->ne[0])) &&
            x->ne[0] % 4 == 0) {
            std::vector<int> r, v;
            bool only_group = readers(gi, x, r, v) && v.empty();
            for (int j : r) only_group = only_group && std::find(group.begin(), group.end(), j) != group.end();
            if (only_group) {
                job.norm = true;
                job.x = x->src[0];
                job.norm_w = x->src[1];
                job.norm_eps = x->params.norm.eps;
                members.push_back(xi->second);
            }
        }
        if (!job_is_safe(gi, job, i, members)) {
            // run each matmul alone at its own place
            for (int j : group) {
                taken[j] = true;
                plan.action[j] = (int)plan.jobs.size();
                plan.jobs.push_back(ggx_cuda_qgemv_single(ggx_graph_node(g, j)));
            }
            continue;
        }
        for (int j : members) {
            taken[j] = true;
            plan.action[j] = ggx_cuda_plan::SKIP;
        }
        plan.action[i] = (int)plan.jobs.size();
        plan.jobs.push_back(job);
    }
    plan_prefill_x16(gi, plan);
    plan_add_norm(gi, plan);
    if (attn_tail > 0) plan_attn_tail(gi, plan, attn_tail);
    if (qkv_rows) plan_qkv_rows(gi, plan);
    // The jobs run in this order: each one's successor (down's: the next layer's q/k/v). Not the
    // step's last job (the head: its blocks run in two waves, so SMs freed early start only part
    // of it; llama3.2-1b 5.0's last down in half the blocks before it lost 0.6%, run 183).
    for (size_t j = 0; j + 2 < plan.jobs.size(); j++) plan.jobs[j].next_weight_bytes = ggx_cuda_qgemv_weight_bytes(plan.jobs[j + 1]);
}

bool ggx_cuda_keeps_x16(const ggx_tensor * n) {
    return n->op == GGX_OP_NONE || n->op == GGX_OP_ROPE || n->op == GGX_OP_KV_STORE || ggx_cuda_qmatmul_is_prefill(n);
}

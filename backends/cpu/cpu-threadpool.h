// Persistent worker threads for the CPU backend.
//
// run(fn, arg) makes every thread of the pool (the caller is thread 0) call fn(arg, ith, nth) once
// and returns when all are done; inside fn, barrier() synchronises all nth threads. The CPU
// backend runs a whole graph inside one run() with a barrier between nodes, so the per-op cost is
// one barrier. Waiting spins briefly (a decode step has hundreds of barriers a few microseconds
// apart), then yields, then sleeps on a condition variable so that an idle pool costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ggx_cpu {

class threadpool {
public:
    explicit threadpool(int n_threads);   // n_threads >= 1 (values below are treated as 1)
    ~threadpool();
    threadpool(const threadpool &) = delete;
    threadpool & operator=(const threadpool &) = delete;

    int  size() const { return n_; }
    void run(void (*fn)(void * arg, int ith, int nth), void * arg);   // not reentrant
    void barrier();                                                    // only from inside fn

private:
    void worker(int ith);
    void shutdown();
    void wait_change(const std::atomic<uint32_t> & word, uint32_t old);
    void wake_sleepers();

    int n_;
    std::vector<std::thread> threads_;
    void (*fn_)(void *, int, int) = nullptr;
    void * arg_ = nullptr;
    std::atomic<bool> stop_{false};

    // Separate cache lines: gen_ is read by idle workers, the barrier words by busy ones.
    alignas(64) std::atomic<uint32_t> gen_{0};
    alignas(64) std::atomic<uint32_t> arrived_{0};
    alignas(64) std::atomic<uint32_t> phase_{0};
    alignas(64) std::atomic<int> n_sleeping_{0};
    std::mutex mu_;
    std::condition_variable cv_;
};

}  // namespace ggx_cpu

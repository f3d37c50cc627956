// Thread pool: generation counter to start work, counting barrier with a phase word to finish.
// Sleeping uses one mutex/condvar pair; a waker only takes the mutex when someone sleeps.
#include "cpu-threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GGX_CPU_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define GGX_CPU_PAUSE() __asm__ __volatile__("yield")
#else
#define GGX_CPU_PAUSE() ((void)0)
#endif

namespace ggx_cpu {

// Spin iterations before yielding, and yields before sleeping. A pause is 10-150 cycles, so
// spinning lasts roughly 10-100 us: longer than the gap between two ops of a decode step, much
// shorter than the gap between two steps when the host samples or detokenizes.
static const int k_spin_pause = 4096;
static const int k_spin_yield = 64;

threadpool::threadpool(int n_threads) : n_(n_threads < 1 ? 1 : n_threads) {
    threads_.reserve((size_t)n_ - 1);
    try {
        for (int i = 1; i < n_; i++) threads_.emplace_back([this, i] { worker(i); });
    } catch (...) {
        shutdown();   // joinable std::threads must not be destroyed
        throw;
    }
}

threadpool::~threadpool() { shutdown(); }

void threadpool::shutdown() {
    stop_.store(true);
    gen_.fetch_add(1);
    {
        std::lock_guard<std::mutex> lock(mu_);
        cv_.notify_all();
    }
    for (std::thread & t : threads_) t.join();
    threads_.clear();
}

void threadpool::wake_sleepers() {
    if (n_sleeping_.load() > 0) {
        // Taking the mutex orders this notify after a sleeper's check-then-wait.
        std::lock_guard<std::mutex> lock(mu_);
        cv_.notify_all();
    }
}

void threadpool::wait_change(const std::atomic<uint32_t> & word, uint32_t old) {
    for (int i = 0; i < k_spin_pause; i++) {
        if (word.load(std::memory_order_acquire) != old) return;
        GGX_CPU_PAUSE();
    }
    for (int i = 0; i < k_spin_yield; i++) {
        if (word.load(std::memory_order_acquire) != old) return;
        std::this_thread::yield();
    }
    std::unique_lock<std::mutex> lock(mu_);
    n_sleeping_.fetch_add(1);   // seq_cst: a waker that misses this count sees our change below
    cv_.wait(lock, [&] { return word.load() != old; });
    n_sleeping_.fetch_sub(1);
}

void threadpool::barrier() {
    if (n_ == 1) return;
    const uint32_t phase = phase_.load();
    if (arrived_.fetch_add(1) == (uint32_t)n_ - 1) {
        // Last to arrive. Nobody can enter the next barrier before phase_ moves, so reset first.
        arrived_.store(0);
        phase_.fetch_add(1);
        wake_sleepers();
    } else {
        wait_change(phase_, phase);
    }
}

void threadpool::run(void (*fn)(void *, int, int), void * arg) {
    if (n_ == 1) {
        fn(arg, 0, 1);
        return;
    }
    fn_ = fn;
    arg_ = arg;
    gen_.fetch_add(1);   // publishes fn_/arg_ (seq_cst includes release)
    wake_sleepers();
    fn(arg, 0, n_);
    barrier();           // all workers finished fn
}

void threadpool::worker(int ith) {
    uint32_t seen = 0;
    for (;;) {
        wait_change(gen_, seen);
        seen = gen_.load();
        if (stop_.load()) return;
        fn_(arg_, ith, n_);
        barrier();
    }
}

}  // namespace ggx_cpu

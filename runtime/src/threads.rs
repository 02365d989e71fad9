//! Where a step runs and whether its kernels may split their work across threads.
//!
//! A step of one graph that cannot wait on another thread, nor wake one, runs on a worker of
//! the process's step pool (as many threads as rayon's global pool, and the stack of a main
//! thread), so a kernel that splits its work keeps the step's thread busy with its share and
//! wakes one other worker: with the step on the caller's thread instead, every split woke two
//! workers and put the caller to sleep, and between splits the idle workers' spinning took
//! the core the serial kernels ran on (ResNet-50 at batch 1 on 2 cores: 39 -> 34 ms).
//! The graphs of a multi-graph step each hold a thread of their own pool and run their kernels
//! whole: they are already the step's parallelism.
//!
//! While a worker waits for the threads it split work with, rayon may run another job on it,
//! another caller's whole step included: per-thread buffers are taken for a call, not
//! borrowed across it (`graphc_cpu_runtime`'s scratch and packing buffers).

use graphc_ir::{Graph, Op, Value};
use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    static RUNS_ONE_GRAPH_OF_SEVERAL: Cell<bool> = const { Cell::new(false) };
}

/// A main thread's stack: the interpreter recurses once per nested region.
const STEP_STACK: usize = 8 << 20;

/// Below this many output elements a loop kernel runs on the calling thread.
pub const PARALLEL_ELEMENTS: usize = 1 << 15;

/// Below this many multiply-adds a matrix product or convolution runs on the calling thread.
pub const PARALLEL_FLOPS: usize = 1 << 20;

/// Whether a kernel running on this thread may split its work across threads.
pub fn may_split() -> bool {
    !RUNS_ONE_GRAPH_OF_SEVERAL.with(Cell::get)
}

/// Marks this thread as one that runs a graph of a multi-graph step (a pool's start handler).
pub(crate) fn mark_graph_thread() {
    RUNS_ONE_GRAPH_OF_SEVERAL.with(|c| c.set(true));
}

/// Whether running `g` may wait for another thread or wake one that waits (a queue, a
/// transfer). Such a step stays on its caller's thread: on a pool worker it could wait for a
/// worker the other side needs, or be queued behind workers that wait for it.
pub(crate) fn may_wait(g: &Graph) -> bool {
    g.walk().iter().any(|&n| matches!(g.nodes[n].op, Op::Enqueue | Op::Dequeue | Op::QueueClose | Op::Send | Op::Recv))
}

/// Whether some node of `g` has work enough for a kernel to split it across threads (by the
/// thresholds above, with a product's multiply-adds bounded from its operands' and result's
/// sizes). A step of a graph where none has gains nothing from the step pool and runs on its
/// caller's thread: handing it to a worker and waking the caller after costs two thread
/// wake-ups, more than such a step's kernels take (an MLP at batch 1).
pub(crate) fn has_parallel_work(g: &Graph) -> bool {
    // A handle (a variable's, a queue's) is no data to split; a tensor of unknown size may be
    // any size.
    let elements = |v: Value| match g.values[v].ty.as_tensor() {
        Some(t) => t.num_elements().unwrap_or(u64::MAX) as f64,
        None => 0.0,
    };
    g.walk().iter().any(|&n| {
        let nd = &g.nodes[n];
        if !nd.regions.is_empty() {
            // A fusion or control flow: the nodes of its regions are walked.
            return false;
        }
        let out = nd.results.iter().map(|&v| elements(v)).fold(0.0, f64::max);
        let largest = nd.operands.iter().map(|&v| elements(v)).fold(out, f64::max);
        // A product splits by its multiply-adds, anything else by the elements it reads or
        // writes (a reduction's by its operand's).
        let flops = match (nd.op, &nd.operands[..]) {
            // [.., m, k] x [.., k, n]: k² is lhs·rhs/result (times the batch, which only
            // overestimates).
            (Op::MatMul, [a, b, ..]) => out * (elements(*a) * elements(*b) / out.max(1.0)).sqrt(),
            // Each element of the larger side sums one output channel's weights times its
            // window.
            (Op::Conv | Op::ConvInputGrad | Op::ConvFilterGrad, [_, w, ..]) => {
                let m = g.values[*w].ty.as_tensor().and_then(|t| t.shape.first().copied()).unwrap_or(1).max(1);
                largest * elements(*w) / m as f64
            }
            _ => return largest >= PARALLEL_ELEMENTS as f64,
        };
        flops >= PARALLEL_FLOPS as f64
    })
}

/// How deeply `g`'s regions nest (0: a body of plain nodes). The interpreter recurses a few
/// frames per level, so only shallow graphs run on a caller's thread, whose stack may be
/// small (a spawned thread's 2 MiB); the step pool's threads have a main thread's.
pub(crate) fn nesting(g: &Graph) -> usize {
    fn depth(g: &Graph, r: graphc_ir::Region) -> usize {
        let inner = g.regions[r].nodes.iter().flat_map(|&n| g.nodes[n].regions.iter().map(|&s| 1 + depth(g, s)));
        inner.max().unwrap_or(0)
    }
    depth(g, g.body)
}

/// The deepest nesting of regions ([`nesting`]) a step runs with on its caller's thread.
pub(crate) const INLINE_NESTING: usize = 4;

/// Runs `f` on a worker of the step pool, or here when this thread is a worker of some pool
/// already (a session called from a rayon job), or when the pool cannot be started.
pub(crate) fn on_pool<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    static STEPS: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = STEPS.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(rayon::current_num_threads())
            .stack_size(STEP_STACK)
            .thread_name(|i| format!("graphc-step-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(p) if rayon::current_thread_index().is_none() => {
            p.install(|| with_workers_awake(p.current_num_threads(), f))
        }
        _ => f(),
    }
}

thread_local! {
    /// Whether this thread runs a step, or keeps itself awake for one: a keep-awake job that
    /// it comes upon (while it waits for work it split) returns at once.
    static BUSY_FOR_A_STEP: Cell<bool> = const { Cell::new(false) };
}

/// How long a worker kept awake for a step spins with nothing to run before it sleeps (a
/// step's long serial stretch costs the other cores no more than this).
const AWAKE_IDLE: std::time::Duration = std::time::Duration::from_millis(1);

/// Runs `f` (a step, on a worker of a pool of `threads`) with the pool's other workers kept
/// awake while it runs, as ONNX Runtime's pool spins between a step's kernels: each takes the
/// step's split work as soon as it is queued. Asleep, a worker takes a futex wake-up to start
/// (tens of microseconds on a VM, as long as a 7x7 layer's half): MobileNet v3 small and
/// BERT-tiny about 10% faster on 2 cores. A worker that has found nothing to run for
/// [`AWAKE_IDLE`] sleeps as before.
fn with_workers_awake<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Tells the workers the step is over, however `f` returns.
    struct Over<'a>(&'a AtomicBool);
    impl Drop for Over<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let over = AtomicBool::new(false);
    let keep_awake = |_: &rayon::Scope<'_>| {
        // A worker that runs a step, or is kept awake already, comes here only from inside
        // that (waiting for split work): spinning here would hold what it waits in.
        if BUSY_FOR_A_STEP.with(|b| b.replace(true)) {
            return;
        }
        let mut idle_since = std::time::Instant::now();
        let mut spins = 0u32;
        while !over.load(Ordering::Acquire) {
            if let Some(rayon::Yield::Executed) = rayon::yield_now() {
                idle_since = std::time::Instant::now();
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                // Now and then the core goes to whatever else is runnable (another process's
                // step: a parameter server beside its workers on the same cores).
                std::thread::yield_now();
                if idle_since.elapsed() > AWAKE_IDLE {
                    break;
                }
            } else {
                std::hint::spin_loop();
            }
        }
        BUSY_FOR_A_STEP.with(|b| b.set(false));
    };
    let outer = BUSY_FOR_A_STEP.with(|b| b.replace(true));
    let out = rayon::in_place_scope(|s| {
        let _over = Over(&over);
        for _ in 1..threads {
            s.spawn(keep_awake);
        }
        f()
    });
    BUSY_FOR_A_STEP.with(|b| b.set(outer));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_pool_runs_on_a_worker_and_splits_are_allowed_there() {
        let (worker, split) = on_pool(|| (rayon::current_thread_index().is_some(), may_split()));
        assert!(worker && split);
    }

    #[test]
    fn steps_keep_their_workers_awake_and_end_whatever_they_run() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // Steps from several callers at once, splitting work, one of them panicking: each
        // returns (a keep-awake job held inside the work it waits for would hang one), and the
        // work split from a step runs on a thread besides the step's where there are two.
        let others = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for caller in 0..4 {
                let others = &others;
                s.spawn(move || {
                    for step in 0..50 {
                        let run = || {
                            on_pool(|| {
                                let me = rayon::current_thread_index();
                                let sum: u64 = (0..64u64)
                                    .map(|i| {
                                        let (a, b) = rayon::join(
                                            || (0..1000).fold(i, |x, _| std::hint::black_box(x)),
                                            || {
                                                if rayon::current_thread_index() != me {
                                                    others.fetch_add(1, Ordering::Relaxed);
                                                }
                                                i * 2
                                            },
                                        );
                                        a + b
                                    })
                                    .sum();
                                assert!(!(caller == 1 && step == 7), "a step that fails");
                                sum
                            })
                        };
                        match std::panic::catch_unwind(run) {
                            Ok(sum) => assert_eq!(sum, 3 * 63 * 64 / 2),
                            Err(_) => assert!(caller == 1 && step == 7),
                        }
                    }
                });
            }
        });
        assert!(rayon::current_num_threads() == 1 || others.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn a_graph_thread_runs_its_kernels_whole() {
        let pool =
            rayon::ThreadPoolBuilder::new().num_threads(1).start_handler(|_| mark_graph_thread()).build().unwrap();
        assert!(!pool.install(may_split));
        assert!(may_split());
    }

    #[test]
    fn only_graphs_with_a_node_worth_splitting_have_parallel_work() {
        let parallel = |src: &str| has_parallel_work(&graphc_ir::parse_module(src).unwrap().graphs[0]);
        // An MLP layer at batch 1: 100K weights read, 100K multiply-adds.
        assert!(!parallel(
            "graph @g(%x: f32[1,784], %w: f32[784,128]) -> (y: f32[1,128]) {\n  %y = matmul %x, %w : f32[1,128]\n  return %y\n}\n"
        ));
        // 64 rows of it: 6.4M multiply-adds.
        assert!(parallel(
            "graph @g(%x: f32[64,784], %w: f32[784,128]) -> (y: f32[64,128]) {\n  %y = matmul %x, %w : f32[64,128]\n  return %y\n}\n"
        ));
        assert!(parallel(
            "graph @g(%x: f32[65536]) -> (y: f32[65536]) {\n  %y = exp %x : f32[65536]\n  return %y\n}\n"
        ));
        // A variable's handle is no data.
        assert!(!parallel(Op::Read.def().example));
    }

    #[test]
    fn nesting_counts_regions_inside_regions() {
        let nesting_of = |src: &str| nesting(&graphc_ir::parse_module(src).unwrap().graphs[0]);
        assert_eq!(nesting_of(Op::Relu.def().example), 0);
        assert_eq!(nesting_of(Op::While.def().example), 1);
    }

    #[test]
    fn queues_and_transfers_may_wait() {
        let waits = |src: &str| {
            let m = graphc_ir::parse_module(src).unwrap();
            m.graphs.iter().any(may_wait)
        };
        assert!(waits(Op::Dequeue.def().example));
        assert!(waits(Op::Recv.def().example));
        assert!(waits(Op::QueueClose.def().example));
        assert!(!waits(Op::Relu.def().example));
    }
}

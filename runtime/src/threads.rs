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

use graphc_ir::{Graph, Op};
use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    static RUNS_ONE_GRAPH_OF_SEVERAL: Cell<bool> = const { Cell::new(false) };
}

/// A main thread's stack: the interpreter recurses once per nested region.
const STEP_STACK: usize = 8 << 20;

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
        Some(p) if rayon::current_thread_index().is_none() => p.install(f),
        _ => f(),
    }
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
    fn a_graph_thread_runs_its_kernels_whole() {
        let pool =
            rayon::ThreadPoolBuilder::new().num_threads(1).start_handler(|_| mark_graph_thread()).build().unwrap();
        assert!(!pool.install(may_split));
        assert!(may_split());
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

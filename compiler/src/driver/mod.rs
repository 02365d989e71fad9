//! The driver: the one way from a file to running kernels, which every subcommand goes
//! through (the CLI parses flags and prints):
//!
//! ```text
//! load (parse or import, verify) -> optimize (the lowerings every backend runs, then the
//! backend's pipeline) -> place and partition (passes of the pass manager, on --devices) ->
//! compile (the backend) -> session (the runtime)
//! ```
//!
//! `inputs.rs` makes a step's feeds, `job.rs` its requests over the partitions,
//! `timeline.rs` records what ran for traces and profiles, and `ops.rs` makes the per-op
//! profile of it. `train.rs` runs a training step graph fed by an input pipeline (a queue in
//! the module) from the data of `dataset.rs`; `distributed.rs` splits it over a cluster's
//! parameter servers and workers.

mod checkpoint;
mod compile;
mod dataset;
mod distributed;
mod files;
mod inputs;
mod job;
mod load;
mod ops;
mod place;
mod report;
mod timeline;
mod train;
mod train_log;
mod weights;

pub use checkpoint::read_checkpoint;
pub use compile::{compile_kernels, optimize, session, session_for};
pub use dataset::{Dataset, Position};
pub use distributed::{read_token, Distributed};
pub use files::Files;
pub use inputs::{freeze_inputs, make_inputs, select_graphs, Feeds, Inputs};
pub use job::{prepare, Job, Prepared};
pub use load::{import_options_for, is_onnx, load, load_diagnosed, LoadFailure};
pub use ops::{path_label, OpRow, OpTable, OpTimes, REFERENCE, WAITING};
pub use place::{place_and_partition, place_graphs, placement_summary, Devices, Placed};
pub use report::{plural, Reported};
pub use timeline::Timeline;
pub use train::{
    plan as plan_training, Ended, Periodic, Resume, StepDone, Steps, TrainJob, TrainSpec, Training, PREFETCH,
};
pub use train_log::TrainLog;
pub use weights::{place_weights, weights_output};

//! A training's log (`graphc train --log`, `graphc.train(log=)`): one JSON object a line,
//! `{"step": N, "loss": X, "time_s": T}` for the steps logged, and for a run that was stopped
//! a last line `{"stopped_at": STEP, "signal": ..., "checkpoint": PATH or null}`. Opened under
//! the writers' rule (a regular file, never a device or a FIFO), written a line at a time as
//! the steps go (a process killed loses no line it logged), and appended to by a run that
//! takes up where an earlier one stopped.

use super::train::StepDone;
use anyhow::anyhow;
use serde_json::json;
use std::io::{LineWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct TrainLog {
    path: PathBuf,
    /// How the log was asked for (`--log`), for errors.
    flag: &'static str,
    out: LineWriter<std::fs::File>,
    /// Step lines written.
    pub lines: usize,
}

impl TrainLog {
    /// The log at `path`: a new one, or (`taking_up`: the run goes on from a checkpoint or
    /// from the ps tasks' state) the earlier run's, its lines kept.
    pub fn open(path: &Path, flag: &'static str, taking_up: bool) -> anyhow::Result<TrainLog> {
        let file = graphc_runtime::fsutil::open_regular_for_writing(path, taking_up)
            .map_err(|e| anyhow!("{flag}: cannot write {}: {e}", path.display()))?;
        Ok(TrainLog { path: path.to_path_buf(), flag, out: LineWriter::new(file), lines: 0 })
    }

    pub fn write(&mut self, d: &StepDone) -> anyhow::Result<()> {
        // serde_json writes the shortest text that reads back as the same number; an f32 loss
        // as an f32, so it reads 0.1 rather than 0.10000000149011612.
        let loss = match (d.loss.is_finite(), d.single) {
            (false, _) => Ok("null".to_string()),
            (true, true) => serde_json::to_string(&(d.loss as f32)),
            (true, false) => serde_json::to_string(&d.loss),
        }
        .map_err(|e| anyhow!("{e}"))?;
        self.lines += 1;
        let line = format!("{{\"step\": {}, \"loss\": {loss}, \"time_s\": {}}}", d.step, d.elapsed.as_secs_f64());
        self.line(&line)
    }

    /// The line of a run stopped (by `signal`, a signal's or an exception's name) after
    /// `step`, with where its checkpoint is.
    pub fn stopped(&mut self, step: u64, signal: &str, checkpoint: Option<&str>) -> anyhow::Result<()> {
        self.line(&json!({"stopped_at": step, "signal": signal, "checkpoint": checkpoint}).to_string())
    }

    fn line(&mut self, line: &str) -> anyhow::Result<()> {
        writeln!(self.out, "{line}").map_err(|e| anyhow!("{}: cannot write {}: {e}", self.flag, self.path.display()))
    }

    pub fn finish(mut self) -> anyhow::Result<()> {
        self.out.flush().map_err(|e| anyhow!("{}: cannot write {}: {e}", self.flag, self.path.display()))
    }
}

//! A cluster in TensorFlow's shape: jobs (`ps`, `worker`, `chief`) made of tasks with
//! addresses, and the task this process is. It comes from TensorFlow's `TF_CONFIG` (what the
//! Kubeflow training operator sets), a file in the same JSON, Slurm's environment, or mpirun's
//! with a host list. The launchers start the processes; nothing here manages them.
//!
//! Workers are numbered with the chief (if the cluster has a `chief` job) first: worker 0 is
//! the chief, as in TensorFlow's parameter-server training.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The job names a cluster may have.
const JOBS: [&str; 3] = ["ps", "worker", "chief"];

/// Which task of the cluster this process is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskId {
    pub job: String,
    pub index: usize,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/job:{}/task:{}", self.job, self.index)
    }
}

/// What this task does in parameter-server training.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Parameter server `i`: holds variables and applies updates.
    Ps(usize),
    /// Worker `i` (0 is the chief): runs the step graph.
    Worker(usize),
}

/// The cluster and this process's place in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Addresses (`host:port`) per job.
    pub jobs: BTreeMap<String, Vec<String>>,
    pub task: TaskId,
    /// Device spec files per job (a cluster file's `devices`), one per task, resolved beside
    /// the file: where placement puts each task's nodes.
    pub devices: BTreeMap<String, Vec<PathBuf>>,
}

/// Where the cluster comes from (`--cluster`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    TfConfig,
    Slurm,
    Mpi,
    File(std::path::PathBuf),
}

impl Source {
    /// `tf_config`, `slurm`, `mpi`, or a file's path.
    pub fn parse(s: &str) -> Source {
        match s {
            "tf_config" => Source::TfConfig,
            "slurm" => Source::Slurm,
            "mpi" => Source::Mpi,
            path => Source::File(path.into()),
        }
    }
}

/// How ranks become tasks for Slurm and MPI: ranks `0..ps` are the ps tasks, the rest workers,
/// each listening at `base_port + rank`.
#[derive(Clone, Debug)]
pub struct Ranks<'a> {
    pub ps: usize,
    pub base_port: u16,
    /// mpirun's host per rank (`--hosts`); one host serves every rank; empty: 127.0.0.1.
    pub hosts: &'a [String],
}

/// TF_CONFIG's JSON (and a cluster file's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    cluster: BTreeMap<String, Vec<String>>,
    task: Option<TaskJson>,
    #[serde(default)]
    environment: Option<String>,
    #[serde(default)]
    rpc_layer: Option<String>,
    /// graphc's addition: device spec files per job, one for every task or a list of one per
    /// task (`{"worker": "cpu2.toml"}`, `{"worker": ["a.toml", "b.toml"]}`).
    #[serde(default)]
    devices: BTreeMap<String, DeviceFiles>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceFiles {
    Every(PathBuf),
    Each(Vec<PathBuf>),
}

#[derive(Deserialize)]
struct TaskJson {
    #[serde(rename = "type")]
    job: String,
    index: usize,
}

impl Cluster {
    /// The cluster from `source`, with `env` standing for the process's environment and
    /// `task` (`--task JOB:INDEX`) naming this task where the source does not (a file) or to
    /// override it.
    pub fn load(
        source: &Source,
        env: &dyn Fn(&str) -> Option<String>,
        task: Option<&str>,
        ranks: &Ranks<'_>,
    ) -> Result<Cluster, String> {
        let task = task.map(parse_task).transpose()?;
        let (mut c, named) = match source {
            Source::TfConfig => {
                let json =
                    env("TF_CONFIG").ok_or("--cluster tf_config: the TF_CONFIG environment variable is not set")?;
                from_json(&json, "TF_CONFIG", Path::new(""))?
            }
            Source::File(path) => {
                let text = read_small(path)?;
                let dir = path.parent().unwrap_or(Path::new(""));
                from_json(&text, &format!("cluster file {}", path.display()), dir)?
            }
            Source::Slurm => (from_slurm(env, ranks)?, true),
            Source::Mpi => (from_mpi(env, ranks)?, true),
        };
        match task {
            Some(t) => c.task = t,
            None if named => {}
            // Which task this process is, said nowhere.
            None => {
                let example = r#""task": {"type": "worker", "index": 0}"#;
                return Err(match source {
                    Source::File(path) => format!(
                        "--cluster {}: the cluster file names no task for this process (a file shared by every task does not); give --task JOB:INDEX, like --task worker:0, or add {example} to it",
                        path.display()
                    ),
                    _ => format!(
                        "TF_CONFIG has no \"task\" saying which task of the cluster this process is; add one ({example}), or give --task JOB:INDEX"
                    ),
                });
            }
        }
        c.check()?;
        Ok(c)
    }

    /// This task's role: ps `i`, or worker `i` with the chief as worker 0.
    pub fn role(&self) -> Role {
        match self.task.job.as_str() {
            "ps" => Role::Ps(self.task.index),
            "chief" => Role::Worker(0),
            _ => Role::Worker(self.task.index + self.jobs.get("chief").map_or(0, Vec::len)),
        }
    }

    /// The ps tasks' addresses.
    pub fn ps(&self) -> &[String] {
        self.jobs.get("ps").map_or(&[], Vec::as_slice)
    }

    /// The workers' addresses, the chief first.
    pub fn workers(&self) -> Vec<String> {
        let chief = self.jobs.get("chief").into_iter().flatten();
        chief.chain(self.jobs.get("worker").into_iter().flatten()).cloned().collect()
    }

    /// This task's own address.
    pub fn address(&self) -> &str {
        &self.jobs[&self.task.job][self.task.index]
    }

    /// This task's device spec, if the cluster gives one.
    pub fn task_devices(&self) -> Option<&Path> {
        self.devices.get(&self.task.job).map(|d| d[self.task.index].as_path())
    }

    fn check(&self) -> Result<(), String> {
        for (job, tasks) in &self.jobs {
            if !JOBS.contains(&job.as_str()) {
                return Err(format!(
                    "the cluster has a job '{job}'; parameter-server training knows {}",
                    JOBS.join(", ")
                ));
            }
            for a in tasks {
                check_address(a).map_err(|why| format!("the address of a task of job '{job}', '{a}': {why}"))?;
            }
        }
        if self.jobs.get("chief").is_some_and(|c| c.len() > 1) {
            return Err("the cluster has more than one chief".into());
        }
        if self.ps().is_empty() {
            return Err("the cluster has no ps task; parameter-server training needs at least one".into());
        }
        if self.workers().is_empty() {
            return Err("the cluster has no worker (nor chief) task".into());
        }
        for (job, files) in &self.devices {
            let tasks = self.jobs.get(job).map_or(0, Vec::len);
            if job == "ps" {
                return Err("the cluster's devices name job 'ps': a ps task applies the updates on its CPU; give device specs for the worker and chief tasks".into());
            }
            if tasks == 0 {
                return Err(format!("the cluster's devices name job '{job}', which the cluster does not have"));
            }
            if files.len() != tasks {
                return Err(format!(
                    "the cluster's devices for job '{job}' list {} spec file(s); expected one per task ({tasks}), or one file for all",
                    files.len()
                ));
            }
        }
        let job = self.task.job.as_str();
        let n = self.jobs.get(job).map_or(0, Vec::len);
        if self.task.index >= n {
            let why = if !JOBS.contains(&job) {
                format!("its job '{job}' is none of {}", JOBS.join(", "))
            } else if n == 0 {
                format!("the cluster has no '{job}' job")
            } else {
                format!("job '{job}' has {n} task(s), 0 to {}", n - 1)
            };
            return Err(format!("this task, {}, is not in the cluster: {why}", self.task));
        }
        Ok(())
    }
}

/// A cluster file is small; a bigger one is not a cluster file.
fn read_small(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("--cluster {}: cannot read the cluster file: {e}", path.display()))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err(format!("--cluster {}: expected a cluster file (JSON, under 1 MiB)", path.display()));
    }
    std::fs::read_to_string(path)
        .map_err(|e| format!("--cluster {}: cannot read the cluster file: {e}", path.display()))
}

/// `JOB:INDEX`, as `--task` takes it.
pub fn parse_task(s: &str) -> Result<TaskId, String> {
    let (job, index) = s.split_once(':').ok_or_else(|| format!("--task {s}: expected JOB:INDEX, like worker:0"))?;
    let index = index.parse().map_err(|_| format!("--task {s}: '{index}' is not a task index"))?;
    Ok(TaskId { job: job.to_string(), index })
}

/// The cluster in `text`, its device spec files resolved against `dir`, and whether the text
/// names this process's task.
fn from_json(text: &str, what: &str, dir: &Path) -> Result<(Cluster, bool), String> {
    let c: Config = serde_json::from_str(text).map_err(|e| format!("{what}: expected TensorFlow's cluster JSON ({{\"cluster\": {{\"ps\": [\"host:port\"], \"worker\": [...]}}, \"task\": {{\"type\": \"worker\", \"index\": 0}}}}): {e}"))?;
    let _ = (&c.environment, &c.rpc_layer);
    let named = c.task.is_some();
    // None: a file shared by every task, where --task says which this is (`Cluster::load`).
    let task = c.task.map_or(TaskId { job: String::new(), index: 0 }, |t| TaskId { job: t.job, index: t.index });
    let devices = c
        .devices
        .into_iter()
        .map(|(job, files)| {
            let n = c.cluster.get(&job).map_or(0, Vec::len);
            let files = match files {
                DeviceFiles::Every(f) => vec![dir.join(f); n.max(1)],
                DeviceFiles::Each(list) => list.iter().map(|f| dir.join(f)).collect(),
            };
            (job, files)
        })
        .collect();
    Ok((Cluster { jobs: c.cluster, task, devices }, named))
}

/// `host:port` with a port number.
fn check_address(a: &str) -> Result<(), String> {
    let (host, port) = a.rsplit_once(':').ok_or("expected host:port")?;
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    port.parse::<u16>().map(|_| ()).map_err(|_| format!("'{port}' is not a port number"))
}

/// The tasks ranks `0..n` make, rank r at `hosts[r]`.
fn from_ranks(rank: usize, n: usize, hosts: &[String], ranks: &Ranks<'_>, what: &str) -> Result<Cluster, String> {
    if ranks.ps == 0 || ranks.ps >= n {
        return Err(format!(
            "{what}: {n} ranks with --ps {} leave no worker; ranks 0..P-1 are the ps tasks, the rest workers",
            ranks.ps
        ));
    }
    if rank >= n {
        return Err(format!("{what}: rank {rank} is not below the {n} ranks"));
    }
    let last = usize::from(ranks.base_port) + n - 1;
    if last > usize::from(u16::MAX) {
        return Err(format!("{what}: --base-port {} + {n} ranks runs past port 65535", ranks.base_port));
    }
    let address = |r: usize| format!("{}:{}", hosts[r], usize::from(ranks.base_port) + r);
    let mut jobs = BTreeMap::new();
    jobs.insert("ps".to_string(), (0..ranks.ps).map(address).collect());
    jobs.insert("worker".to_string(), (ranks.ps..n).map(address).collect());
    let task = if rank < ranks.ps {
        TaskId { job: "ps".into(), index: rank }
    } else {
        TaskId { job: "worker".into(), index: rank - ranks.ps }
    };
    Ok(Cluster { jobs, task, devices: BTreeMap::new() })
}

fn number(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>, String> {
    env(name).map(|v| v.trim().parse().map_err(|_| format!("{name}={v}: expected a number"))).transpose()
}

fn from_slurm(env: &dyn Fn(&str) -> Option<String>, ranks: &Ranks<'_>) -> Result<Cluster, String> {
    let need =
        |name: &str| number(env, name)?.ok_or_else(|| format!("--cluster slurm: {name} is not set (run under srun)"));
    let rank = need("SLURM_PROCID")?;
    let n = need("SLURM_NTASKS")?;
    let list = env("SLURM_JOB_NODELIST")
        .or_else(|| env("SLURM_NODELIST"))
        .ok_or("--cluster slurm: SLURM_JOB_NODELIST is not set")?;
    let nodes = expand_hostlist(&list).map_err(|e| format!("SLURM_JOB_NODELIST={list}: {e}"))?;
    let per_node = match env("SLURM_TASKS_PER_NODE") {
        Some(s) => expand_tasks_per_node(&s).map_err(|e| format!("SLURM_TASKS_PER_NODE={s}: {e}"))?,
        None => vec![n.div_ceil(nodes.len().max(1)); nodes.len()],
    };
    // Slurm's default (block) distribution: the first node's tasks, then the next node's.
    let mut hosts = Vec::with_capacity(n);
    for (node, &k) in nodes.iter().zip(&per_node) {
        hosts.extend(std::iter::repeat_n(node.clone(), k));
    }
    if hosts.len() < n {
        return Err(format!(
            "--cluster slurm: the nodes ({list}) hold {} tasks, fewer than SLURM_NTASKS={n}",
            hosts.len()
        ));
    }
    from_ranks(rank, n, &hosts, ranks, "--cluster slurm")
}

fn from_mpi(env: &dyn Fn(&str) -> Option<String>, ranks: &Ranks<'_>) -> Result<Cluster, String> {
    let rank = number(env, "OMPI_COMM_WORLD_RANK")?.or(number(env, "PMI_RANK")?);
    let size = number(env, "OMPI_COMM_WORLD_SIZE")?.or(number(env, "PMI_SIZE")?);
    let (Some(rank), Some(n)) = (rank, size) else {
        return Err(
            "--cluster mpi: neither OMPI_COMM_WORLD_RANK/_SIZE nor PMI_RANK/PMI_SIZE is set (run under mpirun)".into(),
        );
    };
    let hosts: Vec<String> = match ranks.hosts {
        [] => vec!["127.0.0.1".to_string(); n],
        [one] => vec![one.clone(); n],
        many if many.len() == n => many.to_vec(),
        many => {
            return Err(format!("--hosts gives {} hosts for {n} ranks; give one host, or one per rank", many.len()))
        }
    };
    from_ranks(rank, n, &hosts, ranks, "--cluster mpi")
}

/// Slurm's host list: `node[01-03,07],gpu5` is node01, node02, node03, node07, gpu5.
pub fn expand_hostlist(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        // One entry: up to a comma outside brackets.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let entry = &rest[..end];
        rest = rest[end..].strip_prefix(',').unwrap_or("");
        match entry.split_once('[') {
            None if !entry.is_empty() => out.push(entry.to_string()),
            None => return Err("an empty host name".into()),
            Some((prefix, ranges)) => {
                let (ranges, suffix) = ranges.split_once(']').ok_or("a '[' without its ']'")?;
                for r in ranges.split(',') {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    let (lo, hi): (u64, u64) = (
                        a.parse().map_err(|_| format!("'{r}' is not a range"))?,
                        b.parse().map_err(|_| format!("'{r}' is not a range"))?,
                    );
                    if hi < lo || hi - lo > 100_000 {
                        return Err(format!("'{r}' is not a range"));
                    }
                    for i in lo..=hi {
                        out.push(format!("{prefix}{i:0width$}{suffix}", width = a.len()));
                    }
                }
            }
        }
    }
    if out.is_empty() {
        return Err("no hosts".into());
    }
    Ok(out)
}

/// `SLURM_TASKS_PER_NODE`: `2(x3),1` is 2, 2, 2, 1.
fn expand_tasks_per_node(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let (k, times) = match part.split_once("(x") {
            Some((k, t)) => {
                (k, t.strip_suffix(')').ok_or("expected N(xM)")?.parse::<usize>().map_err(|_| "a bad repeat count")?)
            }
            None => (part, 1),
        };
        let k: usize = k.parse().map_err(|_| format!("'{part}' is not a task count"))?;
        if times > 100_000 {
            return Err("a bad repeat count".into());
        }
        out.extend(std::iter::repeat_n(k, times));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    const RANKS: Ranks<'static> = Ranks { ps: 1, base_port: 7000, hosts: &[] };

    #[test]
    fn tf_config_as_kubeflow_writes_it() {
        let json = r#"{"cluster": {"ps": ["ps-0:2222"], "worker": ["w-0:2222", "w-1:2222"]}, "task": {"type": "worker", "index": 1}, "environment": "cloud"}"#;
        let c = Cluster::load(&Source::TfConfig, &env_of(&[("TF_CONFIG", json)]), None, &RANKS).unwrap();
        assert_eq!(c.role(), Role::Worker(1));
        assert_eq!(c.ps(), ["ps-0:2222"]);
        assert_eq!(c.address(), "w-1:2222");
        // A chief is worker 0; the workers come after it.
        let json = r#"{"cluster": {"chief": ["c:1"], "ps": ["p:2"], "worker": ["w:3"]}, "task": {"type": "worker", "index": 0}}"#;
        let c = Cluster::load(&Source::TfConfig, &env_of(&[("TF_CONFIG", json)]), None, &RANKS).unwrap();
        assert_eq!(c.role(), Role::Worker(1));
        assert_eq!(c.workers(), ["c:1", "w:3"]);
    }

    #[test]
    fn bad_clusters_are_refused_with_what_is_wrong() {
        let load =
            |json: &str| Cluster::load(&Source::TfConfig, &env_of(&[("TF_CONFIG", json)]), None, &RANKS).unwrap_err();
        assert!(load("{").contains("TF_CONFIG: expected TensorFlow's cluster JSON"));
        assert!(
            load(r#"{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}"#).contains("no ps task")
        );
        assert!(load(r#"{"cluster": {"ps": ["a:1"], "worker": ["b"]}, "task": {"type": "ps", "index": 0}}"#)
            .contains("expected host:port"));
        assert!(load(r#"{"cluster": {"ps": ["a:1"], "worker": ["b:x"]}, "task": {"type": "ps", "index": 0}}"#)
            .contains("'x' is not a port"));
        assert!(load(r#"{"cluster": {"ps": ["a:1"], "worker": ["b:2"]}, "task": {"type": "worker", "index": 3}}"#)
            .contains("not in the cluster"));
        assert!(load(r#"{"cluster": {"ps": ["a:1"], "master": ["b:2"]}, "task": {"type": "ps", "index": 0}}"#)
            .contains("job 'master'"));
        let none = Cluster::load(&Source::TfConfig, &env_of(&[]), None, &RANKS).unwrap_err();
        assert!(none.contains("TF_CONFIG environment variable is not set"));
    }

    #[test]
    fn a_missing_task_is_called_missing_and_a_task_outside_the_cluster_says_why() {
        let cluster = r#""cluster": {"ps": ["a:1"], "worker": ["b:2", "c:3"]}"#;
        let load = |json: &str, task: Option<&str>| {
            Cluster::load(&Source::TfConfig, &env_of(&[("TF_CONFIG", json)]), task, &RANKS)
        };
        let e = load(&format!("{{{cluster}}}"), None).unwrap_err();
        assert_eq!(
            e,
            r#"TF_CONFIG has no "task" saying which task of the cluster this process is; add one ("task": {"type": "worker", "index": 0}), or give --task JOB:INDEX"#
        );
        assert_eq!(load(&format!("{{{cluster}}}"), Some("worker:1")).unwrap().role(), Role::Worker(1));
        for (task, why) in [
            (
                r#"{"type": "worker", "index": 2}"#,
                "/job:worker/task:2, is not in the cluster: job 'worker' has 2 task(s), 0 to 1",
            ),
            (
                r#"{"type": "chief", "index": 0}"#,
                "/job:chief/task:0, is not in the cluster: the cluster has no 'chief' job",
            ),
            (
                r#"{"type": "", "index": 0}"#,
                "/job:/task:0, is not in the cluster: its job '' is none of ps, worker, chief",
            ),
            (r#"{"type": "evaluator", "index": 0}"#, "its job 'evaluator' is none of ps, worker, chief"),
        ] {
            let e = load(&format!(r#"{{{cluster}, "task": {task}}}"#), None).unwrap_err();
            assert!(e.ends_with(why), "{task}: {e}");
        }
    }

    #[test]
    fn slurm_ranks_become_ps_then_workers_on_their_nodes() {
        let vars = [
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_NODELIST", "node[07-08]"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ];
        let c = Cluster::load(&Source::Slurm, &env_of(&vars), None, &RANKS).unwrap();
        assert_eq!(c.ps(), ["node07:7000"]);
        assert_eq!(c.workers(), ["node07:7001", "node08:7002", "node08:7003"]);
        assert_eq!(c.role(), Role::Worker(1));
        let missing = Cluster::load(&Source::Slurm, &env_of(&vars[1..]), None, &RANKS).unwrap_err();
        assert!(missing.contains("SLURM_PROCID is not set"), "{missing}");
    }

    #[test]
    fn mpi_ranks_with_a_host_list() {
        let vars = [("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "3")];
        let c = Cluster::load(&Source::Mpi, &env_of(&vars), None, &RANKS).unwrap();
        assert_eq!(c.role(), Role::Ps(0));
        assert_eq!(c.workers(), ["127.0.0.1:7001", "127.0.0.1:7002"]);
        let hosts = ["a".to_string(), "b".to_string()];
        let err = Cluster::load(&Source::Mpi, &env_of(&vars), None, &Ranks { hosts: &hosts, ..RANKS }).unwrap_err();
        assert!(err.contains("2 hosts for 3 ranks"), "{err}");
        let pmi = [("PMI_RANK", "2"), ("PMI_SIZE", "3")];
        let c = Cluster::load(&Source::Mpi, &env_of(&pmi), None, &Ranks { ps: 2, ..RANKS }).unwrap();
        assert_eq!(c.role(), Role::Worker(0));
        let all_ps = Cluster::load(&Source::Mpi, &env_of(&pmi), None, &Ranks { ps: 3, ..RANKS }).unwrap_err();
        assert!(all_ps.contains("leave no worker"), "{all_ps}");
    }

    #[test]
    fn hostlists_expand_as_slurm_writes_them() {
        assert_eq!(expand_hostlist("node[01-03,07],gpu5").unwrap(), ["node01", "node02", "node03", "node07", "gpu5"]);
        assert_eq!(expand_hostlist("a[9-10]b").unwrap(), ["a9b", "a10b"]);
        assert!(expand_hostlist("a[3-1]").is_err());
        assert!(expand_hostlist("a[1-2").is_err());
        assert_eq!(expand_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
    }

    #[test]
    fn a_file_needs_the_task_named() {
        let dir = std::env::temp_dir().join(format!("graphc-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.json");
        std::fs::write(&path, r#"{"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}}"#).unwrap();
        let src = Source::File(path.clone());
        let e = Cluster::load(&src, &env_of(&[]), None, &RANKS).unwrap_err();
        assert_eq!(
            e,
            format!(
                r#"--cluster {}: the cluster file names no task for this process (a file shared by every task does not); give --task JOB:INDEX, like --task worker:0, or add "task": {{"type": "worker", "index": 0}} to it"#,
                path.display()
            )
        );
        let c = Cluster::load(&src, &env_of(&[]), Some("ps:0"), &RANKS).unwrap();
        assert_eq!(c.role(), Role::Ps(0));
        assert_eq!(c.task_devices(), None);
        // Device specs per task, beside the file: one for all of a job's tasks, or a list.
        let cluster =
            r#""cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "chief": ["127.0.0.1:4"]}"#;
        std::fs::write(
            &path,
            format!(r#"{{{cluster}, "devices": {{"worker": ["a.toml", "b.toml"], "chief": "c.toml"}}}}"#),
        )
        .unwrap();
        let c = Cluster::load(&src, &env_of(&[]), Some("worker:1"), &RANKS).unwrap();
        assert_eq!(c.task_devices(), Some(dir.join("b.toml").as_path()));
        let c = Cluster::load(&src, &env_of(&[]), Some("chief:0"), &RANKS).unwrap();
        assert_eq!(c.task_devices(), Some(dir.join("c.toml").as_path()));
        for (devices, why) in [
            (r#"{"worker": ["a.toml"]}"#, "list 1 spec file(s); expected one per task (2)"),
            (r#"{"ps": "p.toml"}"#, "a ps task applies the updates on its CPU"),
            (r#"{"evaluator": "e.toml"}"#, "the cluster does not have"),
        ] {
            std::fs::write(&path, format!(r#"{{{cluster}, "devices": {devices}}}"#)).unwrap();
            let e = Cluster::load(&src, &env_of(&[]), Some("worker:0"), &RANKS).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

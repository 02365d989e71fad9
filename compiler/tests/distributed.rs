//! Parameter-server training across processes, on loopback: the bundled example
//! `ir-spec/examples/ps_mlp.gir` trained by 1 ps and 2 workers as separate `graphc`
//! processes, each started with its TF_CONFIG (or a cluster file and --task) as the README
//! shows. Sync mode ends with the single-process weights bit for bit (each worker computes the
//! same gradient, and the mean of equal tensors is each of them); async and backup training
//! reach the example's loss; two ps tasks share the variables; a wrong token is refused and
//! garbage on the port crashes nothing. Every process is bounded in time.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXAMPLE: &str = "ir-spec/examples/ps_mlp.gir";

fn example() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join(EXAMPLE).display().to_string()
}

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-dist-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `n` ports free right now.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// TF_CONFIG's JSON for a cluster of `ps` and `workers` addresses, as task `job:index`.
fn tf_config(ps: &[u16], workers: &[u16], job: &str, index: usize) -> String {
    let list = |ports: &[u16]| ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect::<Vec<_>>().join(", ");
    format!(
        r#"{{"cluster": {{"ps": [{}], "worker": [{}]}}, "task": {{"type": "{job}", "index": {index}}}}}"#,
        list(ps),
        list(workers)
    )
}

fn spawn(args: &[&str], env: &[(&str, &str)], dir: &Path) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_graphc"));
    c.args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("TF_CONFIG")
        .env_remove("GRAPHC_TOKEN");
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("graphc starts")
}

/// Waits for `child` at most `limit`; killed past it (and the test fails).
fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} ran past {limit:?}:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn succeeded(o: Output, what: &str) -> String {
    let t = text(&o);
    assert!(o.status.success(), "{what} failed:\n{t}");
    t
}

const LIMIT: Duration = Duration::from_secs(240);

/// Trains the example with 1 ps and 2 workers (logging to `dir/wI.jsonl`), the chief
/// checkpointing the ps task to `dir/ps.ckpt` at the end; returns the workers' outputs.
fn train_cluster(dir: &Path, steps: u32, sync: &str) -> Vec<String> {
    train_cluster_with(dir, 1, steps, sync, &[])
}

/// [`train_cluster`] with `ps` ps tasks (logging to `dir/psI.jsonl`) and `extra` flags for
/// every task.
fn train_cluster_with(dir: &Path, ps: usize, steps: u32, sync: &str, extra: &[&str]) -> Vec<String> {
    let ports = free_ports(ps + 2);
    let (ps_ports, workers) = ports.split_at(ps);
    let file = example();
    let steps = steps.to_string();
    let common = [
        &["train", file.as_str(), "--graph", "step", "--steps", steps.as_str(), "--sync", sync][..],
        &["--peer-timeout", "60", "--checkpoint", "ps.ckpt"],
        extra,
    ]
    .concat();
    let servers: Vec<Child> = (0..ps)
        .map(|i| {
            let log = if ps == 1 { "ps.jsonl".to_string() } else { format!("ps{i}.jsonl") };
            let config = tf_config(ps_ports, workers, "ps", i);
            spawn(&[&common[..], &["--log", log.as_str()]].concat(), &[("TF_CONFIG", config.as_str())], dir)
        })
        .collect();
    let children: Vec<Child> = (0..2)
        .map(|i| {
            let log = format!("w{i}.jsonl");
            let config = tf_config(ps_ports, workers, "worker", i);
            spawn(&[&common[..], &["--log", log.as_str()]].concat(), &[("TF_CONFIG", config.as_str())], dir)
        })
        .collect();
    let outs: Vec<String> = children
        .into_iter()
        .enumerate()
        .map(|(i, c)| succeeded(finish(c, LIMIT, "a worker"), &format!("worker {i}")))
        .collect();
    for server in servers {
        let ps_out = succeeded(finish(server, LIMIT, "a ps task"), "a ps task");
        assert!(ps_out.contains("every worker is done"), "{ps_out}");
    }
    assert!(outs[0].contains("saved the ps tasks' variables"), "{}", outs[0]);
    outs
}

/// The losses a worker logged, in step order.
fn losses(log: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["loss"].as_f64().unwrap()
        })
        .collect()
}

/// The tensors of a safetensors file (or of the shards a cluster checkpoint's index names,
/// the parts of a partitioned variable joined: `w/part_K`'s rows in order, a scalar's copies
/// checked equal), by name, as raw bytes.
fn tensors(path: &Path) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    if let Ok(index) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        let shards = index["shards"].as_array().unwrap();
        let mut parts: Vec<(String, usize, Vec<u64>, Vec<u8>)> = Vec::new();
        let mut all: Vec<(String, Vec<u8>)> = Vec::new();
        for s in shards {
            let bytes = std::fs::read(path.with_file_name(s.as_str().unwrap())).unwrap();
            let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
            for (name, view) in st.tensors() {
                let shape = view.shape().iter().map(|&d| d as u64).collect();
                match name.rsplit_once("/part_") {
                    Some((base, k)) => parts.push((base.to_string(), k.parse().unwrap(), shape, view.data().to_vec())),
                    None => all.push((name, view.data().to_vec())),
                }
            }
        }
        parts.sort();
        let mut bases: Vec<String> = parts.iter().map(|p| p.0.clone()).collect();
        bases.dedup();
        for base in bases {
            let mine: Vec<_> = parts.iter().filter(|p| p.0 == base).collect();
            assert!(mine.iter().enumerate().all(|(i, p)| p.1 == i), "{base}: parts missing");
            if mine[0].2.is_empty() {
                assert!(mine.iter().all(|p| p.3 == mine[0].3), "{base}: the copies of a scalar differ");
                all.push((base, mine[0].3.clone()));
            } else {
                all.push((base, mine.iter().flat_map(|p| p.3.clone()).collect()));
            }
        }
        all.sort();
        return all;
    }
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<(String, Vec<u8>)> = st.tensors().into_iter().map(|(n, v)| (n, v.data().to_vec())).collect();
    all.sort();
    all
}

/// Trains the example for `steps` steps in one process, checkpointing to `dir/single.ckpt`.
fn train_single(dir: &Path, steps: u32) {
    let single = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["train", &example(), "--graph", "step", "--steps", &steps.to_string(), "--checkpoint"])
        .arg(dir.join("single.ckpt"))
        .env_remove("TF_CONFIG")
        .output()
        .unwrap();
    succeeded(single, "single-process training");
}

/// The names of the tensors that differ between the cluster's checkpoint and the single
/// process's (both holding every variable and Adam slot).
fn differing(dir: &Path) -> Vec<String> {
    let (ps, one) = (tensors(&dir.join("ps.ckpt")), tensors(&dir.join("single.ckpt")));
    assert_eq!(ps.len(), 24, "every variable and Adam slot is on the ps");
    let names = |t: &[(String, Vec<u8>)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ps), names(&one));
    ps.iter().zip(&one).filter(|(a, b)| a.1 != b.1).map(|(a, _)| a.0.clone()).collect()
}

#[test]
fn sync_training_across_processes_ends_with_the_single_process_weights() {
    let dir = tmpdir("sync");
    let outs = train_cluster(&dir, 40, "sync");
    for o in &outs {
        assert!(o.contains("--sync sync, variables on 1 ps task") && o.contains("bytes of tensors moved"), "{o}");
    }
    train_single(&dir, 40);
    let differ = differing(&dir);
    assert!(differ.is_empty(), "the ps task's weights differ from the single process's: {differ:?}");
    // The ps task applied 40 rounds, each averaging both workers' updates.
    let rounds: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("ps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rounds.len(), 40);
    assert!(rounds.iter().enumerate().all(|(i, r)| r["update"] == i as u64 + 1 && r["workers"] == 2));
    // Both workers saw every step's loss of the single run.
    assert_eq!(losses(&dir.join("w0.jsonl")), losses(&dir.join("w1.jsonl")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn large_variables_split_row_wise_over_two_ps_tasks_train_as_one_process() {
    let dir = tmpdir("rows");
    // Slices of 256 bytes: w1 (512 bytes), w2 (4 KiB) and their Adam moments are split in
    // two parts, one per ps task; the biases and w3 (128 bytes) stay whole.
    let outs = train_cluster_with(&dir, 2, 30, "sync", &["--min-slice-bytes", "256"]);
    assert!(outs[0].contains("variables on 2 ps tasks (split in rows: adam/m/w1 in 2, "), "{}", outs[0]);
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("ps.ckpt")).unwrap()).unwrap();
    let shard = |i: usize| {
        let bytes = std::fs::read(dir.join(index["shards"][i].as_str().unwrap())).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
        names.sort();
        names
    };
    let (a, b) = (shard(0), shard(1));
    for part in ["w2/part_", "w1/part_", "adam/m/w2/part_", "adam/t/w2/part_"] {
        assert!(a.iter().chain(&b).filter(|n| n.starts_with(part)).count() == 2, "{part}: {a:?} {b:?}");
        assert!(a.iter().any(|n| n.starts_with(part)) && b.iter().any(|n| n.starts_with(part)), "{a:?} {b:?}");
    }
    train_single(&dir, 30);
    let differ = differing(&dir);
    assert!(differ.is_empty(), "the partitioned weights differ from the single process's: {differ:?}");
    // One process takes the cluster's checkpoint up as its own: the parts joined, the same
    // weights; ten more steps from it equal ten more steps of the single run.
    let more = |restore: &str, out: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_graphc"))
            .args(["train", &example(), "--graph", "step", "--steps", "40", "--restore", restore, "--checkpoint", out])
            .current_dir(&dir)
            .env_remove("TF_CONFIG")
            .output()
            .unwrap();
        succeeded(o, "training on from a checkpoint")
    };
    let said = more("ps.ckpt", "from_cluster.ckpt");
    assert!(said.contains("step 30"), "{said}");
    more("single.ckpt", "from_single.ckpt");
    assert_eq!(tensors(&dir.join("from_cluster.ckpt")), tensors(&dir.join("from_single.ckpt")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn async_training_halves_the_loss_within_300_steps() {
    let dir = tmpdir("async");
    train_cluster(&dir, 300, "async");
    let logs: Vec<Vec<f64>> = (0..2).map(|i| losses(&dir.join(format!("w{i}.jsonl")))).collect();
    // A worker's first step may already see the other's updates: halved from the higher first.
    let first = logs[0][0].max(logs[1][0]);
    for (i, l) in logs.iter().enumerate() {
        assert_eq!(l.len(), 300);
        assert!(l[299] <= first / 2.0, "worker {i}: loss {first} -> {}", l[299]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_ps_tasks_from_a_cluster_file_with_backup_workers() {
    let dir = tmpdir("file");
    let ports = free_ports(4);
    let list = |ports: &[u16]| ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect::<Vec<_>>().join(", ");
    // Each worker places its step graph on the devices the file gives it: two CPUs, one.
    let cluster = format!(
        r#"{{"cluster": {{"ps": [{}], "worker": [{}]}}, "devices": {{"worker": ["two_cpus.toml", "one_cpu.toml"]}}}}"#,
        list(&ports[..2]),
        list(&ports[2..])
    );
    std::fs::write(dir.join("cluster.json"), cluster).unwrap();
    let cpu = |i: usize| format!("[[device]]\nspec = \"/job:localhost/replica:0/task:0/device:cpu:{i}\"\n");
    std::fs::write(dir.join("two_cpus.toml"), cpu(0) + &cpu(1)).unwrap();
    std::fs::write(dir.join("one_cpu.toml"), cpu(0)).unwrap();
    let file = example();
    let run = |task: &str, extra: &[&str]| {
        let args = [
            &["train", file.as_str(), "--graph", "step", "--steps", "300", "--sync", "backup:1"][..],
            &["--cluster", "cluster.json", "--task", task, "--peer-timeout", "60"],
            extra,
        ]
        .concat();
        spawn(&args, &[], &dir)
    };
    let servers = [run("ps:0", &["--checkpoint", "ckpt"]), run("ps:1", &["--checkpoint", "ckpt"])];
    let workers =
        [run("worker:0", &["--log", "w0.jsonl", "--checkpoint", "ckpt"]), run("worker:1", &["--log", "w1.jsonl"])];
    for (i, w) in workers.into_iter().enumerate() {
        let o = succeeded(finish(w, LIMIT, "a worker"), &format!("worker {i}"));
        assert!(o.contains("variables on 2 ps tasks"), "{o}");
        assert_eq!(o.contains("placed @step on 2 devices: cpu0"), i == 0, "{o}");
    }
    for s in servers {
        succeeded(finish(s, LIMIT, "a ps task"), "a ps task");
    }
    // The variables are spread over both, each held once.
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("ckpt")).unwrap()).unwrap();
    assert_eq!(index["step"], 300);
    let shard = |i: usize| tensors(&dir.join(index["shards"][i].as_str().unwrap()));
    let (a, b) = (shard(0), shard(1));
    assert!(!a.is_empty() && !b.is_empty());
    assert_eq!(a.len() + b.len(), 24);
    assert!(a.iter().all(|(n, _)| b.iter().all(|(m, _)| n != m)));
    // Each worker's first step may already see the other's updates: halved from the higher
    // of the two first losses.
    let (a, b) = (losses(&dir.join("w0.jsonl")), losses(&dir.join("w1.jsonl")));
    let first = a[0].max(b[0]);
    for l in [&a, &b] {
        assert!(l[299] <= first / 2.0, "loss {first} -> {}", l[299]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_wrong_token_is_refused_and_garbage_crashes_nothing() {
    let dir = tmpdir("token");
    let ports = free_ports(2);
    let file = example();
    let args = ["train", file.as_str(), "--graph", "step", "--steps", "5", "--peer-timeout", "60"];
    let server =
        spawn(&args, &[("TF_CONFIG", &tf_config(&ports[..1], &ports[1..], "ps", 0)), ("GRAPHC_TOKEN", "right")], &dir);
    let address = format!("127.0.0.1:{}", ports[0]);
    // Garbage bytes first, once the server listens; then a worker with the wrong token.
    let start = Instant::now();
    let mut sock = loop {
        match std::net::TcpStream::connect(&address) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(60) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("the ps task does not listen: {e}"),
        }
    };
    let _ = sock.write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(4096));
    drop(sock);
    let config = tf_config(&ports[..1], &ports[1..], "worker", 0);
    let wrong =
        finish(spawn(&args, &[("TF_CONFIG", config.as_str()), ("GRAPHC_TOKEN", "wrong")], &dir), LIMIT, "the worker");
    assert!(!wrong.status.success());
    let t = text(&wrong);
    assert!(t.contains("refused worker 0") && t.contains("the request's token does not match the cluster's"), "{t}");
    assert!(!t.contains("right"), "the token shows: {t}");
    // A worker without a token is told it came without one.
    let none = finish(spawn(&args, &[("TF_CONFIG", config.as_str())], &dir), LIMIT, "the worker");
    assert!(!none.status.success());
    let t = text(&none);
    assert!(t.contains("refused worker 0") && t.contains("the request came without one"), "{t}");
    // The server lives on and trains the right worker.
    let right =
        finish(spawn(&args, &[("TF_CONFIG", config.as_str()), ("GRAPHC_TOKEN", "right")], &dir), LIMIT, "the worker");
    succeeded(right, "the worker with the right token");
    let ps = succeeded(finish(server, LIMIT, "the ps task"), "the ps task");
    assert!(ps.contains("refused a request from 127.0.0.1") && ps.contains("a wrong token"), "{ps}");
    assert!(ps.contains(": no token"), "{ps}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `NAME.ca.pem` (a CA) and `NAME.pem`, `NAME.key` (a certificate for 127.0.0.1 it
/// signed, for clients and servers) in `dir`.
fn certificates(dir: &Path, name: &str) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join(format!("{name}.ca.pem")), ca.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

#[test]
fn mutual_tls_trains_and_refuses_a_certificate_of_another_ca() {
    let dir = tmpdir("tls");
    certificates(&dir, "cluster");
    certificates(&dir, "stranger");
    let ports = free_ports(2);
    let file = example();
    let tls = |name: &str| {
        let pem = |suffix: &str| format!("{name}{suffix}");
        // Every task trusts the cluster's CA; the stranger shows a certificate of its own.
        [
            "--tls-cert".to_string(),
            pem(".pem"),
            "--tls-key".into(),
            pem(".key"),
            "--tls-ca".into(),
            "cluster.ca.pem".into(),
        ]
    };
    let run = |job: &str, name: &str| {
        let flags = tls(name);
        let args = [
            &["train", file.as_str(), "--graph", "step", "--steps", "20", "--peer-timeout", "20"][..],
            &flags.iter().map(String::as_str).collect::<Vec<_>>(),
        ]
        .concat();
        spawn(&args, &[("TF_CONFIG", &tf_config(&ports[..1], &ports[1..], job, 0))], &dir)
    };
    let server = run("ps", "cluster");
    let stranger = finish(run("worker", "stranger"), LIMIT, "the stranger");
    assert!(!stranger.status.success());
    let t = text(&stranger);
    assert!(t.contains("TLS failed: received fatal alert") && t.contains("signed by the cluster's CA"), "{t}");
    let worker =
        succeeded(finish(run("worker", "cluster"), LIMIT, "the worker"), "the worker with the cluster's certificate");
    assert!(worker.contains("worker 0 of 1"), "{worker}");
    let ps = succeeded(finish(server, LIMIT, "the ps task"), "the ps task");
    assert!(ps.contains("refused a connection from 127.0.0.1"), "{ps}");
    // The files are checked up front.
    let bad = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["train", &file, "--steps", "1", "--tls-cert", "cluster.key"])
        .args(["--tls-key", "cluster.key", "--tls-ca", "cluster.ca.pem"])
        .env("TF_CONFIG", tf_config(&ports[..1], &ports[1..], "ps", 0))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(text(&bad).contains("--tls-cert: expected a PEM certificate"), "{}", text(&bad));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_clusters_are_one_line_errors() {
    let file = example();
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_graphc"));
        c.args([&["train", file.as_str(), "--steps", "1"][..], extra].concat())
            .env_remove("TF_CONFIG")
            .env_remove("GRAPHC_TOKEN");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = run(&[], &[("TF_CONFIG", "{not json")]);
    assert!(e.starts_with("error: TF_CONFIG: expected TensorFlow's cluster JSON") && e.lines().count() == 1, "{e}");
    // A cluster with no task for this process: the task is missing, not outside the cluster.
    let cluster = r#"{"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}}"#;
    let e = run(&[], &[("TF_CONFIG", cluster)]);
    assert!(e.starts_with("error: TF_CONFIG has no \"task\"") && e.contains("--task JOB:INDEX"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let e = run(&["--cluster", "mpi"], &[]);
    assert!(e.contains("run under mpirun"), "{e}");
    let config =
        r#"{"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "ps", "index": 0}}"#;
    let e = run(&["--sync", "sometimes"], &[("TF_CONFIG", config)]);
    assert!(e.contains("expected async, sync, backup:K or ssp:S"), "{e}");
    let e = run(&["--listen", "0.0.0.0:0"], &[("TF_CONFIG", config)]);
    assert!(e.contains("needs authenticated peers"), "{e}");
    let worker = config.replace(r#""type": "ps""#, r#""type": "worker""#);
    let e = run(&["--out-dir", "x"], &[("TF_CONFIG", worker.as_str())]);
    assert!(e.contains("a worker holds no variables"), "{e}");
    // A ps task's log and checkpoint never replace the model, a device or each other.
    let serve = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_graphc"))
            .args([&["serve", file.as_str()][..], extra].concat())
            .env("TF_CONFIG", config)
            .env_remove("GRAPHC_TOKEN")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(serve(&["--log", &file]).contains("is the model"));
    assert!(serve(&["--log", "/dev/full"]).contains("is a character device"));
    let p = std::env::temp_dir().join(format!("graphc-serve-same-{}", std::process::id()));
    let p = p.to_str().unwrap();
    assert!(serve(&["--log", p, "--checkpoint", p]).contains("are the same file"));
}

/// The step of the cluster checkpoint indexed at `path`, once there is one.
fn checkpoint_step(path: &Path) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v["step"].as_u64()
}

/// Waits until the chief has checkpointed step `step` or later.
fn await_checkpoint(path: &Path, step: u64) {
    let start = Instant::now();
    while checkpoint_step(path).is_none_or(|s| s < step) {
        assert!(start.elapsed() < LIMIT, "no checkpoint of step {step} within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn killed_tasks_restart_and_the_training_ends_within_5_percent_of_the_uninterrupted_loss() {
    let dir = tmpdir("kill");
    let ports = free_ports(3);
    let (ps, workers) = (&ports[..1], &ports[1..]);
    let file = example();
    let steps = "1000";
    let args = |log: &str| -> Vec<String> {
        let mut a: Vec<String> =
            ["train", &file, "--graph", "step", "--steps", steps, "--sync", "sync"].map(String::from).to_vec();
        a.extend(["--checkpoint", "ck", "--checkpoint-every", "10", "--peer-timeout", "120"].map(String::from));
        if !log.is_empty() {
            a.extend(["--log".to_string(), log.to_string()]);
        }
        a
    };
    let start = |job: &str, i: usize, log: &str| {
        let a = args(log);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        spawn(&a, &[("TF_CONFIG", &tf_config(ps, workers, job, i))], &dir)
    };
    let mut server = start("ps", 0, "ps.jsonl");
    let chief = start("worker", 0, "w0.jsonl");
    let mut other = start("worker", 1, "w1.jsonl");
    let ck = dir.join("ck");
    // A worker killed with SIGKILL mid-training, and started again by its "launcher".
    await_checkpoint(&ck, 100);
    other.kill().unwrap();
    other.wait().unwrap();
    let other = start("worker", 1, "w1.jsonl");
    // Then the ps task.
    await_checkpoint(&ck, 400);
    server.kill().unwrap();
    server.wait().unwrap();
    let server = start("ps", 0, "ps.jsonl");
    let chief = succeeded(finish(chief, LIMIT, "the chief"), "the chief");
    assert!(chief.contains("is unreachable; waiting up to 120s"), "{chief}");
    let other = succeeded(finish(other, LIMIT, "the restarted worker"), "the restarted worker");
    assert!(other.contains("taking up after it"), "{other}");
    let ps = succeeded(finish(server, LIMIT, "the restarted ps task"), "the restarted ps task");
    assert!(ps.contains("restored its variables from ck (step"), "{ps}");

    let single = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(["train", &example(), "--graph", "step", "--steps", steps, "--log"])
        .arg(dir.join("single.jsonl"))
        .env_remove("TF_CONFIG")
        .output()
        .unwrap();
    succeeded(single, "single-process training");
    let want = *losses(&dir.join("single.jsonl")).last().unwrap();
    for log in ["w0.jsonl", "w1.jsonl"] {
        let got = *losses(&dir.join(log)).last().unwrap();
        assert!((got - want).abs() <= 0.05 * want, "{log}: final loss {got}, uninterrupted {want}");
    }
    // The restarted tasks appended to their logs: the restarted worker's holds its first
    // run's steps from step 1 and its second run's up to the last, the ps task's the updates
    // of both its runs (each counting from 1).
    let steps_logged = |log: &str| -> Vec<u64> {
        let text = std::fs::read_to_string(dir.join(log)).unwrap();
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap()).collect()
    };
    let w1 = steps_logged("w1.jsonl");
    assert_eq!((w1[0], *w1.last().unwrap()), (1, 1000), "the restarted worker's log");
    let ps_log = std::fs::read_to_string(dir.join("ps.jsonl")).unwrap();
    assert_eq!(ps_log.matches("{\"update\": 1,").count(), 2, "the ps task's log holds both its runs");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mpirun_launches_the_cluster_as_ranks() {
    let dir = tmpdir("mpi");
    // Three ports in a row from a free one (rank r listens at base + r).
    let base = free_ports(1)[0].min(u16::MAX - 3);
    let graphc = env!("CARGO_BIN_EXE_graphc");
    let command = format!(
        "exec {graphc} train {} --graph step --steps 300 --sync sync --cluster mpi --ps 1 --base-port {base} --peer-timeout 60 --log w$OMPI_COMM_WORLD_RANK.jsonl",
        example()
    );
    let mpirun = Command::new("mpirun")
        .args(["-n", "3", "--oversubscribe", "sh", "-c", &command])
        .current_dir(&dir)
        .env_remove("TF_CONFIG")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs (Debian's openmpi-bin; tests/all.sh installs it)");
    let out = succeeded(finish(mpirun, LIMIT, "mpirun"), "mpirun");
    assert!(out.contains("ps task 0: every worker is done"), "{out}");
    // Ranks 1 and 2 are the workers; in sync mode they log the same losses.
    let (a, b) = (losses(&dir.join("w1.jsonl")), losses(&dir.join("w2.jsonl")));
    assert_eq!(a, b);
    assert!(a[299] <= a[0] / 2.0, "loss {} -> {}", a[0], a[299]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_ps_task_whose_workers_never_come_gives_up_after_the_peer_timeout() {
    let dir = tmpdir("idle");
    let ports = free_ports(2);
    let file = example();
    let args = ["train", file.as_str(), "--graph", "step", "--steps", "5", "--peer-timeout", "2"];
    let start = Instant::now();
    let server = spawn(&args, &[("TF_CONFIG", &tf_config(&ports[..1], &ports[1..], "ps", 0))], &dir);
    let o = finish(server, Duration::from_secs(60), "the ps task");
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("no worker called for 2s, and workers [0] have not said they are done"), "{t}");
    assert!(start.elapsed() < Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits until `log` has at least `lines` lines.
fn await_lines(log: &Path, lines: usize) {
    let start = Instant::now();
    while std::fs::read_to_string(log).map_or(0, |t| t.lines().count()) < lines {
        assert!(start.elapsed() < LIMIT, "{} has no {lines} lines within {LIMIT:?}", log.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_frozen_ps_task_is_an_error_naming_it_within_the_peer_timeout() {
    let dir = tmpdir("frozen");
    let ports = free_ports(2);
    let file = example();
    let args =
        ["train", file.as_str(), "--graph", "step", "--steps", "1000000", "--sync", "async", "--peer-timeout", "3"];
    let mut server = spawn(&args, &[("TF_CONFIG", &tf_config(&ports[..1], &ports[1..], "ps", 0))], &dir);
    let worker_args = [&args[..], &["--log", "w0.jsonl"]].concat();
    let worker = spawn(&worker_args, &[("TF_CONFIG", &tf_config(&ports[..1], &ports[1..], "worker", 0))], &dir);
    await_lines(&dir.join("w0.jsonl"), 5);
    // SIGSTOP: the task's connections stay open, and it answers nothing.
    let stop = Command::new("kill").args(["-STOP", &server.id().to_string()]).status().unwrap();
    assert!(stop.success());
    let stopped = Instant::now();
    let o = finish(worker, Duration::from_secs(120), "the worker of a frozen ps task");
    let took = stopped.elapsed();
    let _ = server.kill();
    let _ = server.wait();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    let named = format!("ps task 0 (127.0.0.1:{}): no reply within 5s", ports[0]);
    assert!(t.contains(&named), "{t}");
    // The step's call, then telling the ps tasks it failed and that it is done: each bounded.
    assert!(took < Duration::from_secs(40), "the worker took {took:?} to give up");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_process_for_a_running_task_is_refused_and_the_job_goes_on() {
    let dir = tmpdir("claim");
    let ports = free_ports(3);
    let (ps, workers) = (&ports[..1], &ports[1..]);
    let file = example();
    let args = ["train", file.as_str(), "--graph", "step", "--steps", "300", "--sync", "sync", "--peer-timeout", "60"];
    let start = |job: &str, i: usize, extra: &[&str]| {
        spawn(&[&args[..], extra].concat(), &[("TF_CONFIG", &tf_config(ps, workers, job, i))], &dir)
    };
    let server = start("ps", 0, &["--log", "ps.jsonl"]);
    let chief = start("worker", 0, &["--log", "w0.jsonl", "--step-delay", "10"]);
    let other = start("worker", 1, &["--log", "w1.jsonl"]);
    await_lines(&dir.join("w1.jsonl"), 5);
    for (job, i, address) in [("worker", 1, workers[1]), ("ps", 0, ps[0])] {
        let o = finish(start(job, i, &["--log", "second.jsonl"]), Duration::from_secs(60), "a second claimant");
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        let task = if job == "ps" { format!("ps task {i}") } else { format!("worker {i}") };
        let refused = format!("{task}: 127.0.0.1:{address} is in use: another process runs {task}");
        assert!(t.contains(&refused), "{t}");
        assert!(!dir.join("second.jsonl").exists(), "the second claimant wrote its log");
    }
    for (c, what) in [(chief, "the chief"), (other, "worker 1"), (server, "the ps task")] {
        succeeded(finish(c, LIMIT, what), what);
    }
    assert_eq!(losses(&dir.join("w0.jsonl")), losses(&dir.join("w1.jsonl")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_final_checkpoint_holds_every_workers_last_update() {
    let dir = tmpdir("final");
    let ports = free_ports(3);
    let (ps, workers) = (&ports[..1], &ports[1..]);
    let file = example();
    let args = ["train", file.as_str(), "--graph", "step", "--steps", "100", "--sync", "async", "--peer-timeout", "60"];
    let start = |job: &str, i: usize, extra: &[&str]| {
        spawn(&[&args[..], extra].concat(), &[("TF_CONFIG", &tf_config(ps, workers, job, i))], &dir)
    };
    let server = start("ps", 0, &["--checkpoint", "ck", "--log", "ps.jsonl"]);
    let chief = start("worker", 0, &["--checkpoint", "ck"]);
    // A worker that ends well after the chief.
    let slow = start("worker", 1, &["--step-delay", "20"]);
    let chief = succeeded(finish(chief, LIMIT, "the chief"), "the chief");
    assert!(chief.contains("with every worker's last update"), "{chief}");
    succeeded(finish(slow, LIMIT, "worker 1"), "worker 1");
    succeeded(finish(server, LIMIT, "the ps task"), "the ps task");
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("ck")).unwrap()).unwrap();
    assert_eq!(index["settled"], serde_json::json!([[100, 100]]), "{index}");
    // Every one of the 200 updates applied, and the checkpoint taken after the last.
    let applied = std::fs::read_to_string(dir.join("ps.jsonl")).unwrap().lines().count();
    assert_eq!(applied, 200);
    std::fs::remove_dir_all(&dir).unwrap();
}

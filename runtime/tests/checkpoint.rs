//! Checkpoints: bit-identical round trips, atomic writes, strict restores, background saves.

mod common;
use common::*;
use graphc_runtime::checkpoint::{self, Checkpointer};
use graphc_runtime::fsutil::write_atomically;
use graphc_runtime::{ErrorKind, RunRequest, Session, Tensor};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

const MODEL: &str = "graph @step(%d: f32[3]) -> (w: f32[3]) {
  %w = variable {name = \"layer.w\", init = dense<[1.0, -0.0, 2.5]> : f32[3]} : var<f32[3]>
  %n = variable {name = \"steps\", init = dense<0> : i64[]} : var<i64[]>
  %m = variable {name = \"mask\", init = dense<[true, false]> : bool[2]} : var<bool[2]>
  %u = variable {name = \"unset\"} : var<f64[2,2]>
  %one = constant {value = dense<1> : i64[]} : i64[]
  %c = assign_add %n, %one : i64[]
  %w2 = assign_add %w, %d after(%c) : f32[3]
  return %w2
}
";

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn values(s: &Session) -> Vec<(String, Option<Arc<Tensor>>)> {
    s.snapshot()
}

fn same(a: &[(String, Option<Arc<Tensor>>)], b: &[(String, Option<Arc<Tensor>>)]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((n1, v1), (n2, v2))| {
            n1 == n2
                && match (v1, v2) {
                    (Some(x), Some(y)) => x.bit_identical(y),
                    (None, None) => true,
                    _ => false,
                }
        })
}

fn step(s: &Session, d: &[f32]) {
    s.run(RunRequest::new("step").feed("d", f32t(&[3], d))).unwrap();
}

#[test]
fn save_mutate_restore_is_bit_identical() {
    let dir = tempdir("roundtrip");
    let path = dir.join("model.safetensors");
    let s = session(MODEL);
    // NaN with a payload and -0.0 must survive exactly.
    let odd = f32::from_bits(0x7fc0_1234);
    s.state().variable("layer.w").unwrap().assign(Some(Arc::new(f32t(&[3], &[odd, -0.0, 1e-40])))).unwrap();
    let before = values(&s);
    s.save(&path, Some(7)).unwrap();
    step(&s, &[1.0, 2.0, 3.0]);
    assert!(!same(&before, &values(&s)));
    assert_eq!(s.restore(&path).unwrap(), Some(7));
    assert!(same(&before, &values(&s)), "restored values are bit-identical");
    assert!(s.state().variable("unset").unwrap().value().is_none(), "uninitialized stays uninitialized");
    // A fresh session restores the same state.
    let fresh = session(MODEL);
    fresh.restore(&path).unwrap();
    assert!(same(&before, &values(&fresh)));
}

#[test]
fn a_failed_save_leaves_the_previous_checkpoint_intact() {
    let dir = tempdir("atomic");
    let path = dir.join("model.safetensors");
    let s = session(MODEL);
    s.save(&path, Some(1)).unwrap();
    let good = std::fs::read(&path).unwrap();
    let saved = values(&s);
    step(&s, &[1.0, 1.0, 1.0]);
    // Simulate a crash mid-write: half the new bytes, then the write fails.
    let new_bytes = checkpoint::encode(&s.snapshot(), Some(2)).unwrap();
    let r = write_atomically(&path, |f| {
        f.write_all(&new_bytes[..new_bytes.len() / 2])?;
        Err(std::io::Error::other("simulated crash"))
    });
    assert!(r.is_err());
    assert_eq!(std::fs::read(&path).unwrap(), good, "the old checkpoint is untouched");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind: {leftovers:?}");
    assert_eq!(s.restore(&path).unwrap(), Some(1));
    assert!(same(&saved, &values(&s)));
    // A save into a directory that does not exist fails cleanly too.
    let e = s.save(&dir.join("missing/dir/x.safetensors"), None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Checkpoint);
}

#[test]
fn restore_checks_names_dtypes_and_shapes_and_changes_nothing_on_mismatch() {
    let dir = tempdir("mismatch");
    let path = dir.join("other.safetensors");
    let other = session(
        "graph @g() -> (w: f32[4]) {
  %w = variable {name = \"layer.w\", init = dense<0.0> : f32[4]} : var<f32[4]>
  %n = variable {name = \"steps\", init = dense<0> : i32[]} : var<i32[]>
  %x = variable {name = \"extra\", init = dense<0.0> : f32[]} : var<f32[]>
  %0 = read %w : f32[4]
  return %0
}
",
    );
    other.save(&path, None).unwrap();
    let s = session(MODEL);
    let before = values(&s);
    let e = s.restore(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Checkpoint);
    assert_eq!(
        e.message,
        "the checkpoint does not match the session's variables: \
         \"layer.w\": the session has f32[3], the checkpoint f32[4]; \
         \"steps\": the session has i64[], the checkpoint i32[]; \
         \"mask\" (bool[2]) is missing from the checkpoint; \
         \"unset\" (f64[2,2]) is missing from the checkpoint; \
         \"extra\" is in the checkpoint but is no variable of the session"
    );
    assert!(same(&before, &values(&s)), "nothing was restored");
}

#[test]
fn corrupt_and_missing_files_are_errors_not_panics() {
    let dir = tempdir("corrupt");
    let s = session(MODEL);
    let e = s.restore(&dir.join("nope.safetensors")).unwrap_err();
    assert!(e.message.contains("cannot read checkpoint"), "{e}");
    let path = dir.join("bad.safetensors");
    s.save(&path, None).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for cut in [0, 7, 8, 20, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let e = s.restore(&path).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checkpoint, "cut at {cut}");
    }
    std::fs::write(&path, b"garbage that is not a checkpoint at all").unwrap();
    assert!(s.restore(&path).is_err());
}

#[test]
fn background_checkpoints_do_not_block_steps_and_land_whole() {
    let dir = tempdir("periodic");
    let path = dir.join("bg.safetensors");
    let s = session(MODEL);
    let c = Checkpointer::start(path.clone());
    for i in 1..=50u64 {
        step(&s, &[1.0, 0.0, 0.0]);
        if i % 10 == 0 {
            c.submit(s.snapshot(), Some(i));
        }
    }
    let saved = c.finish().unwrap();
    assert!(saved >= 1, "at least the last snapshot is written");
    let loaded = checkpoint::load(&path).unwrap();
    assert_eq!(loaded.step, Some(50), "the newest snapshot wins");
    assert_eq!(loaded.values["steps"], i64t(&[], &[50]));
    assert_eq!(loaded.values["layer.w"], f32t(&[3], &[51.0, 0.0, 2.5]));
}

#[test]
fn a_snapshot_is_consistent_while_steps_continue() {
    let s = session(MODEL);
    step(&s, &[1.0, 1.0, 1.0]);
    let snap = s.snapshot();
    step(&s, &[1.0, 1.0, 1.0]);
    let steps = snap.iter().find(|(n, _)| n == "steps").unwrap().1.clone().unwrap();
    assert_eq!(*steps, i64t(&[], &[1]), "the snapshot kept the value it saw");
}

#[test]
fn devices_fifos_and_lying_header_lengths_are_refused_without_hanging() {
    let dir = tempdir("special");
    let s = session(MODEL);
    let e = s.restore(std::path::Path::new("/dev/zero")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Checkpoint);
    assert_eq!(e.message, "/dev/zero is a character device, not a regular file; expected a safetensors checkpoint");
    let fifo = dir.join("fifo.safetensors");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = s.restore(&fifo).unwrap_err();
    assert!(e.message.ends_with("is a FIFO, not a regular file; expected a safetensors checkpoint"), "{e}");
    let e = s.restore(&dir).unwrap_err();
    assert!(e.message.contains("is a directory"), "{e}");
    // A header length of 2^64 - 1, and one just past the end of the file.
    for len in [u64::MAX, 100] {
        let path = dir.join(format!("len{len}.safetensors"));
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend(b"{\"a\":{}}");
        std::fs::write(&path, bytes).unwrap();
        let e = s.restore(&path).unwrap_err();
        assert!(e.kind == ErrorKind::Checkpoint && e.message.contains("is not a valid checkpoint"), "{e}");
    }
}

#[test]
fn a_failed_background_save_is_reported_while_the_run_goes_on() {
    let dir = tempdir("unwritable");
    let path = dir.join("missing-dir").join("c.safetensors");
    let s = session(MODEL);
    let c = Checkpointer::start(path);
    c.submit(s.snapshot(), Some(3));
    let start = std::time::Instant::now();
    let failures = loop {
        let f = c.take_failures();
        if !f.is_empty() || start.elapsed() > std::time::Duration::from_secs(10) {
            break f;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(failures.len(), 1, "known before finish: {failures:?}");
    assert_eq!(failures[0].kind, ErrorKind::Checkpoint);
    assert!(failures[0].message.starts_with("saving step 3: cannot write checkpoint"), "{}", failures[0]);
    assert!(c.take_failures().is_empty(), "each failure is reported once");
    // Collected failures are not reported again at the end.
    assert_eq!(c.finish().unwrap(), 0);
}

/// Rewrites the checkpoint at `path` with its metadata changed by `edit`.
fn edit_metadata(path: &std::path::Path, edit: impl FnOnce(&mut std::collections::HashMap<String, String>)) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap_or_default();
    edit(&mut meta);
    let edited = safetensors::serialize(st.tensors(), Some(meta)).unwrap();
    std::fs::write(path, edited).unwrap();
}

#[test]
fn every_metadata_field_is_checked_and_a_bad_one_named_with_what_came() {
    let dir = tempdir("metadata");
    let path = dir.join("m.safetensors");
    let s = session(MODEL);
    step(&s, &[1.0, 2.0, 3.0]);
    s.save(&path, Some(7)).unwrap();
    let good = std::fs::read(&path).unwrap();
    let fresh = session(MODEL);
    let before = values(&fresh);
    // (field, value, what the error expects)
    let bad = [
        ("graphc.step", "-1", "expected the steps done, a whole number from 0 to 18446744073709551615"),
        ("graphc.step", "ten", "expected the steps done"),
        ("graphc.step", "1e23", "expected the steps done"),
        ("graphc.step", "18446744073709551616", "expected the steps done"),
        ("graphc.step", "+5", "expected the steps done"),
        ("graphc.step", " 5", "expected the steps done"),
        ("graphc.step", "", "expected the steps done"),
        ("graphc.step", "3.0", "expected the steps done"),
        ("graphc.train.seed", "x", "expected the shuffling seed, a whole number"),
        ("graphc.train.epoch", "-3", "expected the epoch of the next batch"),
        ("graphc.train.batch", "1.5", "expected the next batch's place in its epoch"),
        ("graphc.train.batch_size", "", "expected the examples in a batch"),
        ("graphc.train.examples", "1e3", "expected the examples in the data"),
        ("graphc.uninitialized.unset", "yes", "expected \"\" (the field says the variable is uninitialized)"),
    ];
    for (key, value, expected) in bad {
        std::fs::write(&path, &good).unwrap();
        edit_metadata(&path, |m| {
            m.insert(key.to_string(), value.to_string());
        });
        let e = fresh.restore(&path).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checkpoint, "{key} = {value:?}");
        let want = format!("{} is not a valid checkpoint: its metadata {key} is {value:?}; {expected}", path.display());
        assert!(e.message.starts_with(&want), "{key} = {value:?}:\n{}\nwanted:\n{want}", e.message);
        assert_eq!(e.message.lines().count(), 1, "{e}");
        assert!(same(&before, &values(&fresh)), "nothing was restored");
        let e = checkpoint::load(&path).unwrap_err();
        assert!(e.message.starts_with(&want), "{e}");
    }
    // Fields that name nothing graphc knows, or contradict the tensors.
    for (key, value, why) in [
        ("graphc.stpe", "7", "its metadata has a field graphc.stpe, which graphc does not know"),
        ("graphc.train.lr", "1", "its metadata has a field graphc.train.lr, which graphc does not know"),
        ("graphc.uninitialized.", "", "its metadata has a field graphc.uninitialized. that names no variable"),
        (
            "graphc.uninitialized.layer.w",
            "",
            "variable \"layer.w\" is both stored and listed as uninitialized (its metadata's graphc.uninitialized.layer.w)",
        ),
    ] {
        std::fs::write(&path, &good).unwrap();
        edit_metadata(&path, |m| {
            m.insert(key.to_string(), value.to_string());
        });
        let e = fresh.restore(&path).unwrap_err();
        assert!(e.message.starts_with(&format!("{} is not a valid checkpoint: {why}", path.display())), "{e}");
    }
    // A long or multi-line value is shown escaped, on one line, cut short.
    std::fs::write(&path, &good).unwrap();
    let long = format!("{}\nx", "9".repeat(100));
    edit_metadata(&path, |m| {
        m.insert("graphc.step".into(), long.clone());
    });
    let e = fresh.restore(&path).unwrap_err();
    assert!(e.message.contains(&format!("is \"{}\"... (102 bytes); expected", "9".repeat(40))), "{e}");
    assert_eq!(e.message.lines().count(), 1);
    // The largest step, and other tools' fields, are taken.
    std::fs::write(&path, &good).unwrap();
    edit_metadata(&path, |m| {
        m.insert("graphc.step".into(), u64::MAX.to_string());
        m.insert("format".into(), "pt".into());
        m.insert("framework.note".into(), "-1".into());
    });
    assert_eq!(fresh.restore(&path).unwrap(), Some(u64::MAX));
    assert!(same(&values(&s), &values(&fresh)));
}

#[test]
fn another_models_checkpoint_is_called_that_and_its_differences_listed_up_to_a_dozen() {
    let dir = tempdir("stranger");
    let path = dir.join("other.safetensors");
    let vars: String = (0..20)
        .map(|i| format!("  %v{i} = variable {{name = \"other.{i:02}\", init = dense<0.0> : f32[2]}} : var<f32[2]>\n"))
        .collect();
    let other = session(&format!("graph @g() -> (y: f32[2]) {{\n{vars}  %y = read %v0 : f32[2]\n  return %y\n}}\n"));
    other.save(&path, Some(1)).unwrap();
    let s = session(MODEL);
    let e = s.restore(&path).unwrap_err();
    // 4 missing and 20 extra: the first 12 named, the rest counted.
    let missing = |v: &str| format!("{v} is missing from the checkpoint; ");
    let extra = |i: usize| format!("\"other.{i:02}\" is in the checkpoint but is no variable of the session; ");
    let want = format!(
        "the checkpoint does not match the session's variables (it has none of them: another model's checkpoint?): {}{}and 12 more differences (in all: 4 missing, 20 extra)",
        ["\"layer.w\" (f32[3])", "\"mask\" (bool[2])", "\"steps\" (i64[])", "\"unset\" (f64[2,2])"]
            .map(missing)
            .concat(),
        (0..8).map(extra).collect::<String>(),
    );
    assert_eq!(e.message, want);
    // The module's variables, as a session of it holds them, checked before any session is.
    let module = graphc_ir::parse_module(MODEL).unwrap();
    let declared = checkpoint::module_variables(&module);
    let held: Vec<(String, String)> = s.state().variables.iter().map(|(n, v)| (n.clone(), v.ty.to_string())).collect();
    assert_eq!(declared.iter().map(|(n, t)| (n.clone(), t.to_string())).collect::<Vec<_>>(), held);
    let loaded = checkpoint::load(&path).unwrap();
    let e = checkpoint::check_variables(&declared, &loaded, "the module").unwrap_err();
    assert!(e.message.starts_with("the checkpoint does not match the module's variables (it has none"), "{e}");
}

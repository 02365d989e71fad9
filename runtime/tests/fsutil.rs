//! Atomic writes: through symlinks, keeping the replaced file's mode, cleaning up what killed
//! writers left, and never touching a concurrent writer's file.

use graphc_runtime::fsutil::write_atomically;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-fsutil-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(path: &Path, text: &str) {
    write_atomically(path, |f| f.write_all(text.as_bytes())).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn symlinks_are_written_through_and_modes_kept() {
    let dir = tempdir("links");
    std::fs::create_dir(dir.join("real")).unwrap();
    let target = dir.join("real/model.gir");
    std::fs::write(&target, "old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A chain of two relative links, each resolved from its own directory.
    symlink("real/model.gir", dir.join("first")).unwrap();
    std::fs::create_dir(dir.join("links")).unwrap();
    symlink("../first", dir.join("links/second")).unwrap();
    write(&dir.join("links/second"), "new");
    assert!(std::fs::symlink_metadata(dir.join("links/second")).unwrap().file_type().is_symlink());
    assert!(std::fs::symlink_metadata(dir.join("first")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    assert_eq!(mode(&target), 0o600, "the replaced file's mode");
    assert_eq!(names(&dir.join("real")), ["model.gir"], "no temporary file left");
    // A plain file keeps an unusual mode too; a dangling link creates its target.
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    write(&target, "newer");
    assert_eq!(mode(&target), 0o640);
    symlink("real/created.gir", dir.join("dangling")).unwrap();
    write(&dir.join("dangling"), "made");
    assert_eq!(std::fs::read_to_string(dir.join("real/created.gir")).unwrap(), "made");
    // A loop of links is an error, not a hang.
    symlink("loop-b", dir.join("loop-a")).unwrap();
    symlink("loop-a", dir.join("loop-b")).unwrap();
    assert!(write_atomically(&dir.join("loop-a"), |f| f.write_all(b"x")).is_err());
}

fn age(path: &Path) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
}

#[test]
fn temporaries_of_killed_writers_are_removed_and_nothing_else() {
    let dir = tempdir("stale");
    let me = std::process::id();
    // Unlocked: their writers are gone, whatever their PIDs (pid 1 runs, and so do we).
    let stale = [".w.safetensors.tmp-1-0".to_string(), format!(".w.safetensors.tmp-{me}-987654321")];
    let kept = [
        // Locked by a writer still at work; a young one (its writer may not have locked it
        // yet); another target's; names that are not the pattern.
        ".w.safetensors.tmp-2-0".to_string(),
        ".w.safetensors.tmp-3-1".to_string(),
        ".other.tmp-4-0".to_string(),
        ".w.safetensors.tmp-5-x".to_string(),
        ".w.safetensors.tmp-+5-0".to_string(),
        "w.safetensors.tmp-5-0".to_string(),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.join(name), "partial").unwrap();
        if name != &kept[1] {
            age(&dir.join(name));
        }
    }
    let writer = std::fs::File::open(dir.join(&kept[0])).unwrap();
    writer.lock().unwrap();
    std::fs::create_dir(dir.join(".w.safetensors.tmp-6-2")).unwrap();
    write(&dir.join("w.safetensors"), "whole");
    let left = names(&dir);
    for name in &stale {
        assert!(!left.contains(name), "{name} is stale: {left:?}");
    }
    for name in &kept {
        assert!(left.contains(name), "{name} must stay: {left:?}");
    }
    assert!(left.contains(&".w.safetensors.tmp-6-2".to_string()), "directories stay");
    // Once its writer is gone (a killed process's locks go with it), the locked one goes too.
    drop(writer);
    write(&dir.join("w.safetensors"), "again");
    assert!(!names(&dir).contains(&kept[0]));
}

#[test]
fn a_killed_writers_temporary_is_removed_by_the_next_write() {
    let dir = tempdir("killed");
    let tmp = dir.join(".k.safetensors.tmp-77-0");
    std::fs::write(&tmp, "partial").unwrap();
    // flock(1) holds the lock as graphc's writers do, until it is killed (--close: its child
    // `sleep` does not share it).
    let mut holder = match std::process::Command::new("flock").arg("--close").arg(&tmp).args(["sleep", "60"]).spawn() {
        Ok(c) => c,
        Err(e) => return eprintln!("skipped: no flock(1): {e}"),
    };
    while std::fs::File::open(&tmp).unwrap().try_lock().is_ok() {
        std::thread::sleep(Duration::from_millis(10));
    }
    age(&tmp);
    write(&dir.join("k.safetensors"), "one");
    assert!(tmp.exists(), "a live writer's file stays");
    holder.kill().unwrap();
    holder.wait().unwrap();
    write(&dir.join("k.safetensors"), "two");
    assert_eq!(names(&dir), ["k.safetensors"]);
}

#[test]
fn executables_are_written_executable_and_missing_directories_named() {
    use graphc_runtime::fsutil::{check_writable, write_executable_atomically};
    let dir = tempdir("exe");
    let exe = dir.join("prog");
    write_executable_atomically(&exe, |f| f.write_all(b"#!/bin/sh\n")).unwrap();
    assert_eq!(mode(&exe) & 0o111, 0o111, "{:o}", mode(&exe));
    // A plain file replaced by a program gains execute where it is readable.
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o640)).unwrap();
    write_executable_atomically(&exe, |f| f.write_all(b"#!/bin/sh\n")).unwrap();
    assert_eq!(mode(&exe), 0o750);
    let missing = dir.join("missing/prog");
    let e = check_writable(&missing).unwrap_err();
    assert_eq!(e.to_string(), format!("there is no directory {}", dir.join("missing").display()));
    let e = write_atomically(&missing, |f| f.write_all(b"x")).unwrap_err();
    assert_eq!(e.to_string(), format!("there is no directory {}", dir.join("missing").display()));
    assert!(check_writable(&dir).is_err(), "a directory");
    assert!(check_writable(Path::new("/dev/null")).unwrap_err().to_string().contains("character device"));
    assert!(check_writable(&dir.join("new")).is_ok());
}

#[test]
fn concurrent_writers_of_one_process_never_remove_each_others_files() {
    let dir = tempdir("concurrent");
    let path = dir.join("c.safetensors");
    std::thread::scope(|s| {
        for t in 0..8 {
            let path = &path;
            s.spawn(move || {
                for i in 0..40 {
                    write_atomically(path, |f| {
                        std::thread::yield_now();
                        f.write_all(format!("{t}-{i}").as_bytes())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(names(&dir), ["c.safetensors"]);
}

#[test]
fn devices_and_fifos_are_not_replaced_by_files() {
    let dir = tempdir("special");
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let link = dir.join("null");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    for target in [fifo.as_path(), link.as_path()] {
        let e = graphc_runtime::fsutil::write_atomically(target, |f| f.write_all(b"x")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{}: {e}", target.display());
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
}

#[test]
fn outputs_that_are_inputs_or_each_other_are_refused_naming_both() {
    use graphc_runtime::fsutil::check_outputs;
    let dir = tempdir("clobber");
    let model = dir.join("m.gir");
    std::fs::write(&model, "module").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    symlink(&model, dir.join("link.gir")).unwrap();
    let inputs = [("the model", model.as_path())];
    // The same file by another spelling: `..`, a symlink.
    for alias in [dir.join("sub/../m.gir"), dir.join("link.gir")] {
        let e = check_outputs(&inputs, &[("--log", &alias)]).unwrap_err();
        assert_eq!(
            e,
            format!(
                "--log {} is the model {}, which this run reads; give --log another path",
                alias.display(),
                model.display()
            )
        );
    }
    // Two outputs of one new file, spelled differently.
    let (a, b) = (dir.join("out.jsonl"), dir.join("sub/../out.jsonl"));
    let e = check_outputs(&inputs, &[("--log", &a), ("--plot", &b)]).unwrap_err();
    assert_eq!(
        e,
        format!("--log {} and --plot {} are the same file; give each its own path", a.display(), b.display())
    );
    check_outputs(&inputs, &[("--log", &a), ("--plot", &dir.join("out.svg"))]).unwrap();
}

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

/// A process id that ran and is gone.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn age(path: &Path) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
}

#[test]
fn temporaries_of_killed_writers_are_removed_and_nothing_else() {
    let dir = tempdir("stale");
    let dead = dead_pid();
    let me = std::process::id();
    let stale = [format!(".w.safetensors.tmp-{dead}-0"), format!(".w.safetensors.tmp-{me}-987654321")];
    let kept = [
        // A live process's (pid 1 always runs), a young one of a dead process (maybe a writer
        // in another PID namespace), another target's, and names that are not the pattern.
        ".w.safetensors.tmp-1-0".to_string(),
        format!(".w.safetensors.tmp-{dead}-1"),
        // A young one with our PID that we are not writing: a writer in another PID namespace.
        format!(".w.safetensors.tmp-{me}-987654322"),
        format!(".other.tmp-{dead}-0"),
        format!(".w.safetensors.tmp-{dead}-x"),
        format!(".w.safetensors.tmp-+{dead}-0"),
        format!("w.safetensors.tmp-{dead}-0"),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.join(name), "partial").unwrap();
        if name != &kept[1] && name != &kept[2] {
            age(&dir.join(name));
        }
    }
    std::fs::create_dir(dir.join(format!(".w.safetensors.tmp-{dead}-2"))).unwrap();
    write(&dir.join("w.safetensors"), "whole");
    let left = names(&dir);
    for name in &stale {
        assert!(!left.contains(name), "{name} is stale: {left:?}");
    }
    for name in &kept {
        assert!(left.contains(name), "{name} must stay: {left:?}");
    }
    assert!(left.contains(&format!(".w.safetensors.tmp-{dead}-2")), "directories stay");
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

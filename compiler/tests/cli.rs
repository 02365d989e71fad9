//! The graphc binary's behaviour: exit codes, located errors, fmt in place, help.

use std::path::PathBuf;
use std::process::{Command, Output};

fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

fn example(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    root.join("ir-spec/examples").join(name).display().to_string()
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_accepts_examples() {
    let out = graphc(&["check", &example("mlp.gir"), &example("loop.gir")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("mlp.gir: ok (1 graph, 6 nodes)"), "{stdout}");
}

#[test]
fn check_reports_located_errors_with_exit_1() {
    let p = tmp("bad.gir", "graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %y = matmull %x, %x : f32[2]\n  %z = neg %q : f32[2]\n  return %y\n}\n");
    let out = graphc(&["check", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let name = p.display().to_string();
    assert!(err.contains(&format!("{name}:2:8: error: unknown op 'matmull'")), "{err}");
    assert!(err.contains(&format!("{name}:3:12: error: %q is not defined")), "{err}");
    assert!(err.contains("2 errors"), "{err}");
}

#[test]
fn missing_file_is_one_clear_line() {
    let out = graphc(&["check", "/nonexistent/model.gir"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("/nonexistent/model.gir: error: cannot read the file"), "{err}");
}

#[test]
fn fmt_prints_canonical_text_and_rewrites_in_place() {
    let p = tmp("messy.gir", "// keep me\ngraph @g(%x: f32[2]) -> (y: f32[2]) {\n  %7 = neg %x\n  %y   = exp %7 {  } : f32[2]\n\n  return %y\n}\n");
    let want = "// keep me\ngraph @g(%x: f32[2]) -> (y: f32[2]) {\n  %0 = neg %x : f32[2]\n  %y = exp %0 : f32[2]\n  return %y\n}\n";
    let path = p.to_str().unwrap();
    let out = graphc(&["fmt", path]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert_eq!(graphc(&["fmt", "--check", path]).status.code(), Some(1));
    assert!(graphc(&["fmt", "--in-place", path]).status.success());
    assert_eq!(std::fs::read_to_string(&p).unwrap(), want);
    assert!(graphc(&["fmt", "--check", path]).status.success());
}

#[test]
fn fmt_leaves_a_broken_file_alone() {
    let text = "graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %y = neg %x : f32[3]\n  return %y\n}\n";
    let p = tmp("broken.gir", text);
    let out = graphc(&["fmt", "--in-place", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["check", "fmt"] {
        let out = graphc(&[sub, "--help"]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: graphc"), "{sub}");
    }
}

#[test]
fn fmt_in_place_writes_through_a_symlink_and_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("graphc-cli-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let real = dir.join("src/model.gir");
    std::fs::write(&real, "graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %y   = neg %x : f32[2]\n  return %y\n}\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.join("model.gir");
    std::os::unix::fs::symlink("src/model.gir", &link).unwrap();
    let out = graphc(&["fmt", "--in-place", link.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "still a link");
    assert!(std::fs::read_to_string(&real).unwrap().contains("  %y = neg %x"), "the target was formatted");
    assert_eq!(std::fs::metadata(&real).unwrap().permissions().mode() & 0o777, 0o600);
}

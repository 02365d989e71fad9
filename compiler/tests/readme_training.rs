//! README.md's training commands run as written: the commands of the paragraph on
//! `graphc train`, of "Training the bundled example" and of its deployment ("From training to
//! deployment": the checkpoint compiled into an executable, which then runs), taken from
//! README.md itself (so the test fails when the README drifts), run in order in a scratch
//! directory where `ir-spec` is the repository's, each with this build's graphc.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// How the README starts a graphc command; the rest of the line is its arguments.
const PREFIXES: [&str; 3] = ["cargo run --release -p graphc -- ", "target/release/graphc ", "graphc "];

/// The indented command lines from the line starting with `start` to the heading `end`.
fn commands(readme: &str, start: &str, end: &str) -> Vec<String> {
    let from = readme.find(start).unwrap_or_else(|| panic!("README.md has no {start:?}"));
    let to = from + readme[from..].find(end).unwrap_or_else(|| panic!("README.md has no {end:?} after {start:?}"));
    readme[from..to]
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| PREFIXES.iter().any(|p| l.starts_with(p)))
        .map(str::to_string)
        .collect()
}

/// Runs a command of the README in `dir`: graphc's, or a program an earlier one wrote
/// (`./NAME ...`); its standard output.
fn run(dir: &Path, command: &str) -> String {
    let (program, args) = match PREFIXES.iter().find_map(|p| command.strip_prefix(p)) {
        Some(args) => (PathBuf::from(env!("CARGO_BIN_EXE_graphc")), args),
        None => {
            let (program, args) = command.split_once(' ').unwrap_or((command, ""));
            (dir.join(program.strip_prefix("./").expect("a graphc command or ./PROGRAM")), args)
        }
    };
    // Run without a shell: the commands must be plain words.
    assert!(
        !args.contains(['\'', '"', '$', '|', '&', ';', '<', '>', '*', '\\']),
        "README.md's command is no longer plain words; teach this test its shell syntax: {command}"
    );
    let o = Command::new(program).args(args.split_whitespace()).current_dir(dir).output().expect("graphc runs");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "README.md's command failed: {command}\n{out}\n{err}");
    out.into_owned()
}

#[test]
fn the_readmes_training_commands_run_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut all = commands(&readme, "`graphc train FILE --graph STEP", "### Training the bundled example");
    all.extend(commands(&readme, "### Training the bundled example", "\n### "));
    assert!(all.len() >= 4, "the training commands are found: {all:?}");
    assert!(all.iter().any(|c| c.contains(" train ")) && all.iter().any(|c| c.contains(" --restore ")), "{all:?}");

    let dir = std::env::temp_dir().join(format!("graphc-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root().join("ir-spec"), dir.join("ir-spec")).unwrap();
    for command in &all {
        run(&dir, command);
    }
    // What they say they write is there.
    for written in ["loss.jsonl", "loss.svg", "w.safetensors", "spirals.ckpt", "weights/w1.npy"] {
        assert!(dir.join(written).is_file(), "{written} is written");
    }

    // The trained checkpoint into an executable, which computes the accuracy the README
    // promises without graphc.
    let deploy: Vec<String> = readme
        [readme.find("From training to deployment").expect("README.md has its deployment")..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with("    "))
        .map_while(|l| l.strip_prefix("    "))
        .map(str::to_string)
        .collect();
    assert!(
        deploy.len() == 2 && deploy[0].contains(" compile ") && deploy[0].contains("--restore spirals.ckpt"),
        "the deployment commands are found: {deploy:?}"
    );
    run(&dir, &deploy[0]);
    let out = run(&dir, &deploy[1]);
    let accuracy: f32 = out
        .lines()
        .find_map(|l| l.strip_prefix("accuracy: f32[] ["))
        .and_then(|v| v.trim_end_matches(']').parse().ok())
        .unwrap_or_else(|| panic!("the executable prints the accuracy: {out}"));
    assert!(accuracy >= 0.99, "the shipped weights are the trained ones: accuracy {accuracy}");
    let _ = std::fs::remove_dir_all(&dir);
}

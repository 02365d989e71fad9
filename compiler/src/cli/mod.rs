//! The `graphc` command line: flags in `args.rs`, one module per group of subcommands, each
//! calling the library's driver and printing.

#[macro_use]
mod output;
mod args;
mod bench;
mod compile;
mod ir;
mod logging;
mod run;
mod signals;
mod simulate;
mod train;

use args::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;

/// The environment variables earlier versions read, and the flags that replace them: set and
/// silently ignored, they would leave a script believing it got what it asked for.
const RETIRED: [(&str, &str); 4] = [
    ("GRAPHC_JIT_ISA", "--isa"),
    ("GRAPHC_JIT_CLIF", "graphc opt --emit clif"),
    ("GRAPHC_JIT_DISASM", "graphc opt --emit asm"),
    ("GRAPHC_JIT_DUMP", "graphc bench --dump-code DIR"),
];

pub fn main() -> ExitCode {
    // Every error exits 1, a usage error too (clap's own is 2): scripts test one status.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    logging::init(cli.verbose, cli.quiet);
    for (var, instead) in RETIRED {
        if std::env::var_os(var).is_some() {
            tracing::warn!("{var} is no longer read; use {instead}");
        }
    }
    let result = match cli.command {
        Command::Check(a) => ir::check(&a, cli.quiet),
        Command::Fmt(a) => ir::fmt(&a),
        Command::Opt(a) => ir::opt(&a),
        Command::Import(a) => ir::import(&a),
        Command::Dot(a) => ir::dot(&a),
        Command::Bench(a) => bench::bench(&a),
        Command::Compile(a) => compile::compile(&a),
        Command::Simulate(a) => simulate::simulate(&a),
        Command::Run(a) => run::run(&a),
        Command::Train(a) => train::train(&a),
        Command::Serve(a) => train::serve(&a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Diagnostics come rendered against their source, as they are.
            match e.downcast_ref::<graphc::driver::Reported>() {
                Some(r) => eprint!("{}", r.0),
                None => eprintln!("error: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

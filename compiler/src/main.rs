//! The `graphc` command-line tool: one subcommand per stage of the pipeline (see `cli/`).

/// mimalloc keeps freed memory for a moment before returning it to the OS, so the tensors of
/// one step reuse the pages of the last instead of faulting fresh ones in (tens of ms for a
/// 64 MiB tensor).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}

//! Logging (`tracing`) to standard error: the driver's stages with their times, checkpoints,
//! the cluster's events, and warnings. `-q` shows errors only, the default warnings, `-v`
//! graphc's info lines, `-vv` its debug lines (each pass's time), `-vvv` its trace lines and
//! other crates' debug ones; without `-v` or `-q`, `RUST_LOG` (env_logger's syntax, e.g.
//! `graphc=debug,graphc_dist=trace`) says what to show.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Installs the subscriber for the process, as `-v` (counted) and `-q` ask; a `RUST_LOG` that
/// does not parse is a warning, and the default applies.
pub fn init(verbose: u8, quiet: bool) {
    let mut bad_env = None;
    let filter = match (verbose, quiet) {
        (_, true) => EnvFilter::new("error"),
        (0, false) => match std::env::var("RUST_LOG") {
            Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
                bad_env = Some(format!("RUST_LOG={spec}: {e}; showing warnings only"));
                EnvFilter::new("warn")
            }),
            _ => EnvFilter::new("warn"),
        },
        // `graphc` as a target prefix covers every crate of the workspace (graphc_dist, ...).
        (1, false) => EnvFilter::new("warn,graphc=info"),
        (2, false) => EnvFilter::new("warn,graphc=debug"),
        _ => EnvFilter::new("debug,graphc=trace"),
    };
    // Set once, before anything logs; a second call (none is made) would keep the first.
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).event_format(Lines).try_init();
    if let Some(w) = bad_env {
        tracing::warn!("{w}");
    }
}

/// One line per event, as graphc's other messages read: `warning: MESSAGE key=value ...`;
/// debug and trace lines, and other crates' lines, name where they come from.
struct Lines;

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let level = *meta.level();
        let word = match level {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        write!(w, "{word}: ")?;
        if level > Level::INFO || !meta.target().starts_with("graphc") {
            write!(w, "[{}] ", meta.target())?;
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

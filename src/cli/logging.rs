//! Where the library's `tracing` events go: stderr, for every command. A detached runner's stderr
//! is its turn's `runner.log`, so what a runner warns of (a leader it could not record, a kill
//! that left survivors, a waker it could not start) is read there; a CLI command's warnings reach
//! the terminal that ran it. `TOLLGATE_LOG` sets the filter (`tracing_subscriber`'s `EnvFilter`
//! syntax, e.g. `debug` or `tollgate=info`; an absolute path, as a hook's environment has there, is
//! not a filter); without it `serve` logs at `info`, every other command
//! at `warn`, so a command that went well prints nothing extra.

/// Installs the stderr subscriber with `default_filter` unless `TOLLGATE_LOG` says otherwise. A
/// second call (a test's process that already has one) leaves the first in place.
pub fn init(default_filter: &str) {
    let filter = match std::env::var("TOLLGATE_LOG") {
        Ok(value) if is_filter(&value) => tracing_subscriber::EnvFilter::try_new(value).ok(),
        _ => None,
    }
    .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Whether `TOLLGATE_LOG`'s value is meant as a filter. A hook's environment carries
/// `TOLLGATE_LOG` as the absolute path of the turn's stdout log (spec/turns.md, "Hooks"); a
/// `tollgate` command run by a hook must not read that path as a filter that hides every
/// warning, so an absolute path is not one.
fn is_filter(value: &str) -> bool {
    !value.starts_with('/')
}

#[cfg(test)]
mod tests {
    use super::is_filter;

    #[test]
    fn a_hooks_log_path_is_not_a_filter_and_a_level_is() {
        assert!(!is_filter("/home/u/.tollgate/tasks/t/turns/1/stdout.log"));
        assert!(is_filter("debug"));
        assert!(is_filter("tollgate=info,warn"));
    }
}

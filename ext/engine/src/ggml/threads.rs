//! How many threads a pass runs on when the cores are shared.
//!
//! ggml's worker threads meet at a spinning barrier after every op. When another
//! process (or a Ruby thread) takes one of two cores, a thread that reaches the
//! barrier spins through its time slice while the other waits to be scheduled, and
//! decode loses ~70 % of its speed; one thread on the core left keeps ~half.
//!
//! The [`Governor`] watches the scheduler's own account of the computing thread:
//! the share of each pass it spent runnable but not running (`run_delay` in
//! `/proc/thread-self/schedstat`). A share above [`CONTENDED`] over
//! [`CONTENDED_WINDOWS`] windows of passes in a row drops a thread (one window may be a
//! burst: a GC, another thread's brief work). Below the configured count it probes one
//! more thread after [`FIRST_PROBE`] and keeps it if the share stays low; each failed
//! probe doubles the wait, up to [`LAST_PROBE`], so a lasting load costs a probe
//! window now and then and a passing one costs little. On a quiet machine the share is
//! ~0 and nothing changes.
//!
//! The thread count never changes a result but in one place: ggml splits a lone
//! query's flash attention over ≥ 512 cells among its threads, so such a node runs on
//! the configured count, and the rest of its pass on fewer, a graph of its own for each
//! run of nodes (see [`crate::ggml::Graph::node_bits_depend_on_threads`]).

use std::time::{Duration, Instant};

/// The share of a window spent waiting for a core above which it counts as contended.
pub const CONTENDED: f64 = 0.15;
/// How many contended windows in a row drop a thread.
pub const CONTENDED_WINDOWS: u32 = 2;
/// How long a window of passes lasts before the governor decides.
pub const WINDOW: Duration = Duration::from_millis(100);
/// How long the governor runs below the configured count before its first probe.
pub const FIRST_PROBE: Duration = Duration::from_millis(200);
/// The longest wait between probes while the cores stay taken.
pub const LAST_PROBE: Duration = Duration::from_millis(3200);

/// The CPUs this process may run on, counted as Ruby's `Etc.nprocessors` counts them:
/// its affinity mask on Linux, else the CPUs online.
pub fn available_cpus() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the set is plain data, zeroed, and sized for the call.
        let count = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                libc::CPU_COUNT(&set)
            } else {
                0
            }
        };
        if count > 0 {
            return count as usize;
        }
    }
    // SAFETY: sysconf reads a value and has no other effect.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// The thread count of the next passes, from how the last ones were scheduled.
#[derive(Debug)]
pub struct Governor {
    max: usize,
    current: usize,
    window: Window,
    /// Contended windows in a row at the current count.
    contended: u32,
    /// While below `max`: when to try one more thread.
    next_probe: Option<Instant>,
    /// The wait before the next probe, doubled by each failed one.
    backoff: Duration,
    /// The last window ran one thread more, to see whether a core is free again.
    probing: bool,
}

#[derive(Debug, Default)]
struct Window {
    wall: Duration,
    waited: Duration,
}

/// What the scheduler says of the calling thread: time run, and time waited on a run queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedStat {
    pub run: Duration,
    pub waited: Duration,
}

impl SchedStat {
    /// This thread's, or `None` where the kernel keeps no such account.
    pub fn of_this_thread() -> Option<SchedStat> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let mut fields = text.split_ascii_whitespace().map(str::parse::<u64>);
        let run = fields.next()?.ok()?;
        let waited = fields.next()?.ok()?;
        Some(SchedStat {
            run: Duration::from_nanos(run),
            waited: Duration::from_nanos(waited),
        })
    }
}

impl Governor {
    pub fn new(max: usize) -> Governor {
        Governor {
            max,
            current: max,
            window: Window::default(),
            contended: 0,
            next_probe: None,
            backoff: FIRST_PROBE,
            probing: false,
        }
    }

    /// The thread count for the next pass.
    pub fn threads(&self) -> usize {
        self.current
    }

    /// Accounts a pass that ran on [`Governor::threads`] threads for `wall`, of which the
    /// computing thread waited `waited` for a core.
    pub fn record(&mut self, wall: Duration, waited: Duration, now: Instant) {
        self.window.wall += wall;
        self.window.waited += waited;
        if self.window.wall < WINDOW {
            return;
        }
        let contended = self.window.waited.as_secs_f64() / self.window.wall.as_secs_f64() > CONTENDED;
        self.window = Window::default();
        if std::mem::take(&mut self.probing) {
            if contended {
                // The core is still taken: back down, and wait longer before the next try.
                self.current -= 1;
                self.backoff = (self.backoff * 2).min(LAST_PROBE);
            } else {
                self.backoff = FIRST_PROBE;
            }
            self.next_probe = (self.current < self.max).then(|| now + self.backoff);
            return;
        }
        self.contended = if contended { self.contended + 1 } else { 0 };
        if self.contended >= CONTENDED_WINDOWS && self.current > 1 {
            self.current -= 1;
            self.contended = 0;
            self.next_probe = Some(now + self.backoff);
        } else if self.next_probe.is_some_and(|at| now >= at) {
            self.current += 1;
            self.probing = true;
            self.next_probe = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one window of passes waiting `share` of their time.
    fn window(g: &mut Governor, share: f64, now: &mut Instant) {
        let wall = Duration::from_millis(20);
        for _ in 0..5 {
            *now += wall;
            g.record(wall, wall.mul_f64(share), *now);
        }
    }

    #[test]
    fn a_quiet_machine_keeps_every_thread() {
        let (mut g, mut now) = (Governor::new(2), Instant::now());
        for _ in 0..100 {
            window(&mut g, 0.01, &mut now);
            assert_eq!(g.threads(), 2);
        }
    }

    #[test]
    fn one_contended_window_is_a_burst_and_two_drop_a_thread() {
        let (mut g, mut now) = (Governor::new(2), Instant::now());
        for _ in 0..10 {
            window(&mut g, 0.5, &mut now);
            window(&mut g, 0.0, &mut now);
            assert_eq!(g.threads(), 2);
        }
        window(&mut g, 0.33, &mut now);
        window(&mut g, 0.33, &mut now);
        assert_eq!(g.threads(), 1);
    }

    #[test]
    fn a_busy_core_is_probed_again_ever_more_rarely() {
        let (mut g, mut now) = (Governor::new(2), Instant::now());
        window(&mut g, 0.33, &mut now);
        window(&mut g, 0.33, &mut now);
        // One thread on the core left waits for nobody; a probe's second thread does.
        let mut probed_after = Vec::new();
        let mut windows_at_one = 0;
        for _ in 0..100 {
            window(&mut g, 0.0, &mut now);
            windows_at_one += 1;
            if g.threads() == 2 {
                probed_after.push(windows_at_one);
                windows_at_one = 0;
                window(&mut g, 0.33, &mut now);
                assert_eq!(g.threads(), 1);
            }
        }
        // Windows of 100 ms: 200 ms, then 400 ms, 800, 1600, and 3200 at most.
        assert_eq!(probed_after, [2, 4, 8, 16, 32, 32]);
    }

    #[test]
    fn a_probe_that_finds_the_core_free_keeps_the_thread() {
        let (mut g, mut now) = (Governor::new(2), Instant::now());
        window(&mut g, 0.4, &mut now);
        window(&mut g, 0.4, &mut now);
        while g.threads() == 1 {
            window(&mut g, 0.0, &mut now);
        }
        for _ in 0..50 {
            window(&mut g, 0.02, &mut now);
            assert_eq!(g.threads(), 2);
        }
    }

    #[test]
    fn many_threads_step_down_one_at_a_time_and_never_below_one() {
        let (mut g, mut now) = (Governor::new(4), Instant::now());
        for expected in [3, 2, 1] {
            window(&mut g, 0.5, &mut now);
            window(&mut g, 0.5, &mut now);
            assert_eq!(g.threads(), expected);
        }
        // Still contended: probes of a second thread now and then, never none at all.
        for _ in 0..100 {
            window(&mut g, 0.5, &mut now);
            assert!((1..=2).contains(&g.threads()));
        }
    }

    #[test]
    fn this_threads_schedstat_counts_its_running_time() {
        let Some(before) = SchedStat::of_this_thread() else {
            return; // A kernel without schedstat: the governor never lowers the count.
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let after = SchedStat::of_this_thread().expect("read before");
        assert!(after.run > before.run);
    }
}

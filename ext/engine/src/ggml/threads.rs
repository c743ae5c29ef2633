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
//! more thread once a window at the lower count finds a core waiting for nobody, after
//! [`FIRST_PROBE`], and keeps it if the share stays low; each failed probe doubles the
//! wait, up to [`LAST_PROBE`]. A probe is dear: while the core it tries is taken, its
//! pass runs at a fraction of one thread's speed, each of ggml's barriers waiting for the
//! thread that is not scheduled (a pass of 80 ms takes several hundred). So a probe falls
//! due only when the run queue shows a core that the rest of the machine leaves free
//! (`procs_running` of `/proc/stat`, read then); a load that stays, such as one busy
//! process on two cores, is then never probed at all. While even the fewer threads wait
//! for a core (more runnable threads than cores) it never probes: a thread more could
//! only spin at ggml's barrier, which is how a pass on two threads under a load of four
//! falls to a third of one thread's speed. A governor starts on the cores that the run
//! queue leaves free when it is made, so a short run on a busy machine does not spend its
//! first passes finding out. On a quiet machine the share is ~0 and nothing changes.
//!
//! The thread count never changes a result. ggml gives each thread whole rows of every
//! op but one: a lone query's flash attention over ≥ 512 cells is split into a chunk of
//! cells per thread. There the chunks stay those of the configured count on fewer
//! threads, each thread computing its share of them in turn
//! ([`crate::ggml::Graph::fix_attention_chunks`]), so that node too runs on the
//! governor's count and no barrier waits for a thread the cores cannot run.

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
    online_cpus()
}

/// The CPUs online in the machine.
fn online_cpus() -> usize {
    // SAFETY: sysconf reads a value and has no other effect.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(online).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// How many threads of the whole machine are runnable now, the caller's included
/// (`procs_running` of `/proc/stat`); `None` where the kernel does not say.
fn runnable_threads() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("procs_running ")?.trim().parse().ok())
}

/// How many cores the other runnable threads of the machine leave free now, the
/// caller's counted as free (it is the one asking); `None` where the kernel does not say,
/// or where this process may run on fewer CPUs than the machine has (`taskset`, a cpuset
/// container): the run queue counts threads on CPUs it cannot use.
pub fn free_cores() -> Option<usize> {
    let cpus = available_cpus();
    if cpus < online_cpus() {
        return None;
    }
    let others = runnable_threads()?.saturating_sub(1);
    Some(cpus.saturating_sub(others))
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
    /// A governor of at most `max` threads that starts on those the other runnable
    /// threads of the machine leave free now.
    pub fn new(max: usize) -> Governor {
        Governor::starting(max, free_cores().unwrap_or(max), Instant::now())
    }

    /// A governor of at most `max` threads that starts on `free` of them (at least one).
    fn starting(max: usize, free: usize, now: Instant) -> Governor {
        let current = free.clamp(1, max);
        Governor {
            max,
            current,
            window: Window::default(),
            contended: 0,
            next_probe: (current < max).then(|| now + FIRST_PROBE),
            backoff: FIRST_PROBE,
            probing: false,
        }
    }

    /// The thread count for the next pass.
    pub fn threads(&self) -> usize {
        self.current
    }

    /// Accounts a pass that ran on [`Governor::threads`] threads for `wall`, of which the
    /// computing thread waited `waited` for a core. `free_cores` says how many cores the
    /// rest of the machine leaves free now (as [`free_cores`]); it is asked only when a
    /// probe falls due.
    pub fn record(
        &mut self,
        wall: Duration,
        waited: Duration,
        now: Instant,
        free_cores: impl FnOnce() -> Option<usize>,
    ) {
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
        } else if !contended && self.next_probe.is_some_and(|at| now >= at) {
            if free_cores().is_some_and(|free| free <= self.current) {
                // Every core is taken: ask the run queue again after the next window.
                self.next_probe = Some(now + WINDOW);
            } else {
                self.current += 1;
                self.probing = true;
                self.next_probe = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A governor of `max` threads made on a machine with every core free.
    fn quiet(max: usize) -> (Governor, Instant) {
        let now = Instant::now();
        (Governor::starting(max, max, now), now)
    }

    /// Feeds one window of passes waiting `share` of their time, on a kernel that does
    /// not say how many cores are free.
    fn window(g: &mut Governor, share: f64, now: &mut Instant) {
        window_with(g, share, None, now);
    }

    /// Feeds one window of passes waiting `share` of their time, while the run queue
    /// shows `free` cores free.
    fn window_with(g: &mut Governor, share: f64, free: Option<usize>, now: &mut Instant) {
        let wall = Duration::from_millis(20);
        for _ in 0..5 {
            *now += wall;
            g.record(wall, wall.mul_f64(share), *now, || free);
        }
    }

    #[test]
    fn a_quiet_machine_keeps_every_thread() {
        let (mut g, mut now) = quiet(2);
        for _ in 0..100 {
            window(&mut g, 0.01, &mut now);
            assert_eq!(g.threads(), 2);
        }
    }

    #[test]
    fn one_contended_window_is_a_burst_and_two_drop_a_thread() {
        let (mut g, mut now) = quiet(2);
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
        let (mut g, mut now) = quiet(2);
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
    fn a_core_the_run_queue_shows_taken_is_never_probed() {
        let (mut g, mut now) = quiet(2);
        window(&mut g, 0.33, &mut now);
        window(&mut g, 0.33, &mut now);
        // One busy process on two cores: the thread left waits for nobody, and the other core is taken.
        for _ in 0..200 {
            window_with(&mut g, 0.0, Some(1), &mut now);
            assert_eq!(g.threads(), 1);
        }
        // The process ends: the next window probes, and the probe stays.
        window_with(&mut g, 0.0, Some(2), &mut now);
        assert_eq!(g.threads(), 2);
        window_with(&mut g, 0.0, Some(2), &mut now);
        assert_eq!(g.threads(), 2);
    }

    #[test]
    fn a_probe_that_finds_the_core_free_keeps_the_thread() {
        let (mut g, mut now) = quiet(2);
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
        let (mut g, mut now) = quiet(4);
        for expected in [3, 2, 1] {
            window(&mut g, 0.5, &mut now);
            window(&mut g, 0.5, &mut now);
            assert_eq!(g.threads(), expected);
        }
        for _ in 0..100 {
            window(&mut g, 0.5, &mut now);
            assert_eq!(g.threads(), 1);
        }
    }

    #[test]
    fn a_thread_that_waits_itself_never_probes_and_the_end_of_the_load_is_found() {
        let (mut g, mut now) = quiet(2);
        window(&mut g, 0.5, &mut now);
        window(&mut g, 0.5, &mut now);
        // More runnable threads than cores: the one thread left waits too; a second could only spin.
        for _ in 0..200 {
            window(&mut g, 0.4, &mut now);
            assert_eq!(g.threads(), 1);
        }
        // The load ends: the first quiet window past the wait probes, and the probe stays.
        window(&mut g, 0.0, &mut now);
        assert_eq!(g.threads(), 2);
        window(&mut g, 0.0, &mut now);
        assert_eq!(g.threads(), 2);
    }

    #[test]
    fn a_busy_machine_starts_on_the_free_cores_and_probes_once_they_are_quiet() {
        let now = Instant::now();
        assert_eq!(Governor::starting(2, 2, now).threads(), 2);
        assert_eq!(Governor::starting(8, 16, now).threads(), 8);
        assert_eq!(Governor::starting(2, 0, now).threads(), 1);
        let (mut g, mut now) = (Governor::starting(4, 2, now), now);
        assert_eq!(g.threads(), 2);
        window(&mut g, 0.0, &mut now);
        window(&mut g, 0.0, &mut now);
        assert_eq!(g.threads(), 3);
    }

    #[test]
    fn the_run_queue_counts_the_caller() {
        if let Some(n) = runnable_threads() {
            assert!(n >= 1);
            assert!(free_cores().is_some_and(|free| free <= available_cpus()));
        }
    }

    #[test]
    fn a_thread_kept_to_fewer_cpus_than_the_machine_has_is_told_nothing_by_the_run_queue() {
        if online_cpus() < 2 || runnable_threads().is_none() {
            return; // One CPU: no set is narrower than the machine.
        }
        // SAFETY: the sets are plain data; this test thread's own mask, restored below.
        unsafe {
            let mut all: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut all),
                0
            );
            let first = (0..libc::CPU_SETSIZE as usize)
                .find(|&cpu| libc::CPU_ISSET(cpu, &all))
                .unwrap();
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(first, &mut one);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one),
                0
            );
            let (cpus, free) = (available_cpus(), free_cores());
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &all);
            assert_eq!((cpus, free), (1, None));
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

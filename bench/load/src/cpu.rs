//! Where the load run's processes run and what they cost: the generator and the servers on
//! separate cores (`sched_setaffinity`), and CPU time read from the kernel (`getrusage` for the
//! generator, `/proc/<pid>/stat` for a server), so a ratio of two rates can be checked against the
//! generator's own saturation and turned into CPU µs per request.

use std::process::Command;

static PLACEMENT: std::sync::OnceLock<Placement> = std::sync::OnceLock::new();

/// The run's placement (nothing pinned until [`set`] is called: the soak pins nothing).
pub fn placement() -> Option<&'static Placement> {
    PLACEMENT.get()
}

/// Fixes the run's placement and pins this process (the generator).
pub fn set(p: Placement) -> std::io::Result<&'static Placement> {
    p.pin_generator()?;
    Ok(PLACEMENT.get_or_init(|| p))
}

/// Which CPUs the generator and the servers run on.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The generator's CPU (this process and its threads).
    pub generator: Option<usize>,
    /// The servers' CPUs (every process this run starts).
    pub servers: Vec<usize>,
}

impl Placement {
    /// With two or more CPUs and `pin`: the last CPU for the generator, the others for the
    /// servers. Otherwise nothing is pinned (and the generator shares the servers' cores).
    pub fn new(pin: bool) -> Placement {
        let cpus = allowed_cpus();
        if !pin || cpus.len() < 2 {
            return Placement {
                generator: None,
                servers: cpus,
            };
        }
        let (gen, servers) = cpus.split_last().expect("two or more CPUs");
        Placement {
            generator: Some(*gen),
            servers: servers.to_vec(),
        }
    }

    /// Pins this process (the generator) to its CPU.
    pub fn pin_generator(&self) -> std::io::Result<()> {
        match self.generator {
            Some(c) => set_affinity(0, &[c]),
            None => Ok(()),
        }
    }

    /// Makes `cmd` start on the servers' CPUs (the child would otherwise inherit the
    /// generator's).
    pub fn place_server(&self, cmd: &mut Command) {
        if self.generator.is_none() {
            return;
        }
        use std::os::unix::process::CommandExt;
        let cpus = self.servers.clone();
        // SAFETY: `sched_setaffinity` is async-signal-safe, and the closure allocates nothing
        // (the set is built on the stack from a vector made before the fork).
        unsafe {
            cmd.pre_exec(move || set_affinity(0, &cpus));
        }
    }

    /// Makes `cmd` start on the generator's CPU (a Redis standing in for one on a host of its
    /// own, measured while the generator leaves most of its core idle).
    pub fn place_on_generator(&self, cmd: &mut Command) {
        let Some(g) = self.generator else {
            return;
        };
        use std::os::unix::process::CommandExt;
        // SAFETY: as in `place_server`.
        unsafe {
            cmd.pre_exec(move || set_affinity(0, &[g]));
        }
    }

    pub fn describe(&self) -> String {
        match self.generator {
            Some(g) => format!(
                "generator pinned to CPU {g}, servers to CPU(s) {:?}",
                self.servers
            ),
            None => "nothing pinned: the generator shares the servers' cores".into(),
        }
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if ok != 0 {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

fn set_affinity(pid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: as above; CPU_SET only writes inside the set for c < CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let r = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// CPU time (user + system) this process has used so far, every thread, in µs.
pub fn own_cpu_us() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(u.ru_utime) + us(u.ru_stime)
}

/// CPU time (user + system) process `pid` has used so far, every thread, in µs (from
/// `/proc/<pid>/stat`, in clock ticks).
pub fn process_cpu_us(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line (utime, stime) are 12 and 13 after the state (field 3).
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000 / hz)
}

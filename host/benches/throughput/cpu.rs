//! CPU time per message, of the consumer process and of the broker, over the same window as a
//! scenario's msgs/s. On 2 shared cores the consumer and the broker take turns on the same CPUs,
//! so a consumer's rate swings with whatever else the VM does; the CPU it spends per message
//! does not, and says which consumer leaves more of the machine to the broker.

/// CPU time (ns) that every live thread of `pid` has run, from `/proc/<pid>/task/*/schedstat`
/// (ns resolution, unlike the 10 ms ticks of `/proc/<pid>/stat`). A thread that exits inside a
/// window drops out of it: the windows here end before the consumer's connection closes.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// The broker's process (RabbitMQ's `beam.smp`), if it runs on this machine.
fn broker_pid() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "beam.smp")
        })
}

/// CPU µs per message in one window: the consumer's process and the broker's.
#[derive(Clone, Copy)]
pub(super) struct CpuUse {
    pub(super) consumer_us: f64,
    pub(super) broker_us: f64,
}

/// The start of a window.
pub(super) struct CpuMark {
    pid: u32,
    broker: Option<u32>,
    consumer_ns: u64,
    broker_ns: u64,
}

impl CpuMark {
    /// Marks the CPU used so far by `pid` (the consumer) and by the broker.
    pub(super) fn now(pid: u32) -> CpuMark {
        let broker = broker_pid();
        CpuMark {
            pid,
            broker,
            consumer_ns: cpu_ns(pid),
            broker_ns: broker.map_or(0, cpu_ns),
        }
    }

    /// CPU per message for the `messages` handled since the mark.
    pub(super) fn per_message(&self, messages: u64) -> CpuUse {
        let per = |ns: u64| ns as f64 / 1000.0 / messages.max(1) as f64;
        CpuUse {
            consumer_us: per(cpu_ns(self.pid).saturating_sub(self.consumer_ns)),
            broker_us: self
                .broker
                .map_or(f64::NAN, |b| per(cpu_ns(b).saturating_sub(self.broker_ns))),
        }
    }
}

/// Prints the median CPU per message of each scenario that recorded one.
pub(super) fn print(rows: &[(&str, &[CpuUse])]) {
    use super::median as med;
    if rows.iter().all(|(_, v)| v.is_empty()) {
        return;
    }
    println!();
    println!(
        "{:<62} {:>10} {:>8} {:>8}",
        "CPU per message (µs), same window as msgs/s", "consumer", "broker", "total"
    );
    for (name, v) in rows.iter().filter(|(_, v)| !v.is_empty()) {
        let c = med(v.iter().map(|u| u.consumer_us).collect());
        let b = med(v.iter().map(|u| u.broker_us).collect());
        println!("{name:<62} {c:>10.1} {b:>8.1} {:>8.1}", c + b);
    }
}

/// Median consumer CPU per message.
pub(super) fn consumer_median(v: &[CpuUse]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    super::median(v.iter().map(|u| u.consumer_us).collect())
}

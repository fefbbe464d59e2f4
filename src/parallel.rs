//! Work spread over threads: over every core for the per-project file work that big plans are
//! mostly made of (reading `Pulumi.yaml` files, hashing project files), or over as many threads as
//! a run may start processes for the per-project questions asked of an engine.

/// How many cores this process may use (asked once: the answer reads the cgroup's files).
pub fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `f(0)`, …, `f(n - 1)`, in order, computed on every core (on this thread when there is one core
/// or little work).
pub fn map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = threads();
    if threads == 1 || n < 64 {
        return (0..n).map(f).collect();
    }
    let chunk = n.div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|start| {
                scope.spawn(move || (start..(start + chunk).min(n)).map(f).collect::<Vec<_>>())
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker does not panic"))
            .collect()
    })
}

/// `f(0)`, …, `f(n - 1)`, in order, at most `width` at once: for work that waits on processes
/// rather than on a core.
pub fn map_with<T: Send>(width: usize, n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let width = width.clamp(1, n.max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<T>>> = (0..n).map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..width {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let value = f(i);
                    *results[i].lock().expect("a result is never poisoned") = Some(value);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .expect("a result is never poisoned")
                .expect("every index was done")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_results_come_in_order() {
        for n in [0, 1, 63, 64, 1000] {
            assert_eq!(
                super::map(n, |i| i * 2),
                (0..n).map(|i| i * 2).collect::<Vec<_>>()
            );
            assert_eq!(
                super::map_with(3, n, |i| i * 2),
                (0..n).map(|i| i * 2).collect::<Vec<_>>()
            );
        }
    }
}

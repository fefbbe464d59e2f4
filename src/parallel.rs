//! Work spread over every core, for the per-project file work that big plans are mostly made of
//! (reading `Pulumi.yaml` files, hashing project files).

/// `f(0)`, …, `f(n - 1)`, in order, computed on every core (on this thread when there is one core
/// or little work).
pub fn map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_results_come_in_order() {
        for n in [0, 1, 63, 64, 1000] {
            assert_eq!(
                super::map(n, |i| i * 2),
                (0..n).map(|i| i * 2).collect::<Vec<_>>()
            );
        }
    }
}

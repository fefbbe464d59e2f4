//! One reader of a running run for all the pages that watch it (docs/commands.md, "serve"):
//! the first stream of a run starts its poller, which reads the run's record, previews and new
//! log lines every half second and publishes them; every other stream of that run reads what it
//! published. So ten open pages cost the ledger what one does, and a long log is read once, a
//! line at a time, not again for each page. The poller ends once no stream watches, or the run
//! has ended.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;

use crate::ledger::{Previewed, RunRecord};

use super::Shared;
use super::source::LogCursor;

/// How often the ledger is read for a running run.
pub const EVERY: Duration = Duration::from_millis(500);

/// What a run's poller last read.
#[derive(Clone, Default)]
pub struct Seen {
    /// The run's record and its projects' previews; `None` before the first read, or once the
    /// run is gone (its ledger made anew).
    pub run: Option<Arc<(RunRecord, BTreeMap<String, Previewed>)>>,
    /// Every log line read so far, in order: (project, line).
    pub lines: Arc<Vec<(String, String)>>,
    /// The run is gone, or has ended: nothing more will come.
    pub over: bool,
    /// How many reads there have been (a new one is a new `Seen`, even when equal).
    pub reads: u64,
}

/// The pollers of the runs being watched, by run id.
#[derive(Default)]
pub struct Pollers {
    running: Mutex<HashMap<String, Weak<watch::Sender<Seen>>>>,
}

/// A stream's hold on its run's poller: what it published, and the poller kept alive while held.
pub struct Held {
    pub seen: watch::Receiver<Seen>,
    _poller: Arc<watch::Sender<Seen>>,
}

impl Pollers {
    /// The poller of `run_id`, started when none runs.
    pub fn watch(&self, app: &Shared, run_id: &str) -> Held {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|_, poller| poller.strong_count() > 0);
        if let Some(poller) = running.get(run_id).and_then(Weak::upgrade) {
            return Held {
                seen: poller.subscribe(),
                _poller: poller,
            };
        }
        let (publish, seen) = watch::channel(Seen::default());
        let publish = Arc::new(publish);
        running.insert(run_id.to_string(), Arc::downgrade(&publish));
        tokio::spawn(poll(
            app.clone(),
            run_id.to_string(),
            Arc::downgrade(&publish),
        ));
        Held {
            seen,
            _poller: publish,
        }
    }
}

/// Reads run `run_id` until nobody holds `publish`, or the run is over.
async fn poll(app: Shared, run_id: String, publish: Weak<watch::Sender<Seen>>) {
    let mut cursor = LogCursor::default();
    let mut seen = Seen::default();
    loop {
        let Some(sender) = publish.upgrade() else {
            return;
        };
        if let Some(next) = read(&app, &run_id, &seen, &mut cursor).await {
            seen = next;
            let over = seen.over;
            sender.send_replace(seen.clone());
            if over {
                return;
            }
        }
        drop(sender);
        tokio::time::sleep(EVERY).await;
    }
}

/// One look at the run: `None` when the ledger did not answer (the next look tries again).
async fn read(app: &Shared, run_id: &str, last: &Seen, cursor: &mut LogCursor) -> Option<Seen> {
    let (id, source) = (run_id.to_string(), &app.source);
    let found = source
        .read(move |ledger| {
            let Some(record) = ledger.run(&id)? else {
                return Ok(None);
            };
            let previews = crate::ui::recorded::previews_of(ledger, &record)?;
            Ok(Some((record.as_seen(), previews)))
        })
        .await;
    let (record, previews) = match found {
        Ok(Some(Some(found))) => found,
        Ok(_) => {
            return Some(Seen {
                over: true,
                reads: last.reads + 1,
                ..last.clone()
            });
        }
        Err(_) => return None,
    };
    let mut lines = last.lines.clone();
    let paths = record.projects.iter().map(|p| p.path.clone()).collect();
    if let Ok((new, moved)) = (source.logs(run_id.to_string(), paths, cursor.clone())).await {
        *cursor = moved;
        if !new.is_empty() {
            Arc::make_mut(&mut lines).extend(new);
        }
    }
    let over = record.status != crate::status::RunStatus::Running;
    Some(Seen {
        run: Some(Arc::new((record, previews))),
        lines,
        over,
        reads: last.reads + 1,
    })
}

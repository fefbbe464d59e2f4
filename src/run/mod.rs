//! Running a plan: the run plan (what will be done), the runner (doing it: the scheduler, the
//! engine processes, the hooks, interruption), and the events it tells its sinks.

pub mod approval;
pub mod drain;
pub mod events;
pub mod fanout;
pub mod gate;
pub mod holds;
pub mod hooks;
pub mod inputs;
pub mod interrupt;
pub mod kubeconfig;
pub mod narrow;
pub mod outputs;
pub mod plan;
pub mod prepare;
pub mod priority;
pub mod process;
pub mod project;
pub mod recorder;
pub mod redact;
pub mod retention;
pub mod runner;
pub mod scheduler;
pub mod spawn;
pub mod stacks;
pub mod watchdog;

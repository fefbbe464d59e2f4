//! Running a plan: the scheduler, the engine processes, and what each project ended as.

pub mod clock;
pub mod hooks;
pub mod process;
pub mod project;
pub mod redact;
pub mod scheduler;
pub mod watchdog;

//! One module per subcommand.
pub mod doctor;
pub mod log;
pub mod plot;
pub mod watch;

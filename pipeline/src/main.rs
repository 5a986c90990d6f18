fn main() -> std::process::ExitCode {
    rampart_rules::run()
}

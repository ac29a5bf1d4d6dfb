#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Tracker

struct RolesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "roles",
        abstract: "The least-privilege database roles tracker migrate creates: set their passwords, check a connection.",
        discussion: """
            tracker_ingest (tracker serve's DATABASE_URL), tracker_projector (PROJECTOR_DATABASE_URL, \
            tracker project, tracker retention) and tracker_report (REPORT_DATABASE_URL, tracker report, \
            tracker explain). See docs/OPERATIONS.md, "Database roles".
            """,
        subcommands: [Passwords.self, Check.self])

    struct Passwords: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set the three roles' passwords and write their connection URLs to a file (mode 0600).",
            discussion: """
                Run as the owner (a superuser or a role with CREATEROLE), with the owner's DATABASE_URL. \
                A password comes from TRACKER_INGEST_PASSWORD, TRACKER_PROJECTOR_PASSWORD or \
                TRACKER_REPORT_PASSWORD when set, otherwise 32 random bytes are generated. Only each \
                password's SCRAM-SHA-256 verifier is sent to PostgreSQL, and no password is printed: \
                the URLs (DATABASE_URL, PROJECTOR_DATABASE_URL, REPORT_DATABASE_URL, the owner's URL \
                with the role and password in place of its login) go to --env-file only.
                """)

        @Option(help: "Where to write the three URLs (shell and Compose env-file syntax; created with mode 0600).")
        var envFile: String?

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let owner = try database.resolved()
            var passwords: [(DatabaseRole, String)] = []
            var generated = false
            for role in DatabaseRole.allCases {
                if let given = Settings.process.string(role.passwordSetting) {
                    passwords.append((role, given))
                } else {
                    passwords.append((role, DatabaseRole.generatePassword()))
                    generated = true
                }
            }
            if generated && envFile == nil {
                throw ValidationError("--env-file is needed: generated passwords are written there and nowhere else")
            }
            // The file first, under a temporary name: if it cannot be written, no password has
            // changed yet; it takes its name only once the passwords are set.
            let pending = envFile.map { $0 + ".tmp" }
            if let pending {
                var text = "# Written by tracker roles passwords: one connection per least-privilege role.\n"
                for (role, password) in passwords {
                    let url = ConnectionString.replacingLogin(of: owner, user: role.rawValue, password: password)
                    text += "\(role.setting)=\(shellQuoted(url))\n"
                }
                try writePrivateFile(pending, text)
            }
            let pool = ConnectionPool(conninfo: owner, maxConnections: 1, logger: makeLogger())
            defer { pool.close() }
            let settings = passwords
            do {
                do {
                    try await pool.withConnection { connection in
                        try connection.transaction {
                            for (role, password) in settings { try role.setPassword(password, on: connection) }
                        }
                    }
                } catch {
                    // Nothing changed (one transaction): the new passwords' file goes too.
                    if let pending { unlink(pending) }
                    throw error
                }
            } catch let error as DatabaseError where error.state == .insufficientPrivilege {
                throw CommandFailure("the roles' passwords could not be set: \(error.serverMessage) (run as a superuser or a role with CREATEROLE)")
            } catch let error as DatabaseError where error.state == .undefinedObject {
                throw CommandFailure("\(error.serverMessage): run tracker migrate first, it creates the roles")
            }
            if let envFile, let pending, rename(pending, envFile) != 0 {
                throw CommandFailure("the passwords are set but \(pending) could not be renamed to \(envFile): \(String(cString: strerror(errno))); it holds them")
            }
            print("set the passwords of \(DatabaseRole.allCases.map(\.rawValue).joined(separator: ", "))"
                  + (envFile.map { "; their connection URLs are in \($0) (mode 0600)" } ?? ""))
        }
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say what the role of --database-url may do that the given role should not, or must and may not; exit 1 if anything.")

        @Option(help: "The work the connection is for: ingest, projector or report.")
        var role: DatabaseRole

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let pool = try database.pool()
            defer { pool.close() }
            let role = self.role
            let findings = try await pool.withConnection { try role.findings(on: $0) }
            if findings.isEmpty {
                print("the connection's role may do \(role.work) work and nothing that would bypass the log's protections")
                return
            }
            for finding in findings { print(finding.message(setting: "--database-url", roles: [role])) }
            throw ExitCode(1)
        }
    }
}

/// Writes `text` to a new file readable by its owner only (replacing any file at `path`).
func writePrivateFile(_ path: String, _ text: String) throws {
    unlink(path)
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw CommandFailure("cannot create \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    let bytes = Array(text.utf8)
    var written = 0
    while written < bytes.count {
        let n = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { throw CommandFailure("cannot write \(path): \(String(cString: strerror(errno)))") }
        written += n
    }
}

/// `text` in single quotes for a shell or Compose env file (a quote inside becomes '\\'').
func shellQuoted(_ text: String) -> String {
    var out = "'"
    for character in text {
        if character == "'" { out += "'\\''" } else { out.append(character) }
    }
    return out + "'"
}

/// `--role ingest|projector|report`.
extension DatabaseRole: ExpressibleByArgument {
    public init?(argument: String) {
        guard let role = Self.allCases.first(where: { $0.work == argument }) else { return nil }
        self = role
    }

    public static var allValueStrings: [String] { allCases.map(\.work) }
}

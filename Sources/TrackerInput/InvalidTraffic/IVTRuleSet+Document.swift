/// Reading a rule set from its activation document and writing and reading its stored form.
extension IVTRuleSet {
    /// The members an activation document may have.
    static let activationFields = ["name", "sources", "userAgents", "userAgentLists", "appExemptions", "ipRanges", "ipRangeFiles",
                                   "maxClicksPerAd", "maxEventsPerClientMinute"]
    /// The members of a stored document (files are already inlined).
    static let storedFields = ["name", "sources", "userAgents", "appExemptions", "ipRanges", "maxClicksPerAd", "maxEventsPerClientMinute"]

    /// Reads an activation document (PROTOCOL.md 8): a JSON object whose members are all optional.
    ///
    /// - `name`: free text saying what the rule set is.
    /// - `userAgents`: `[{"pattern": "…", "name": "…"}]`, `name` optional.
    /// - `userAgentLists`: file names; each file is a JSON array of objects with a `pattern`
    ///   (the `crawler-user-agents.json` format; their other members are ignored).
    /// - `appExemptions`: `[{"pattern": "…", "reason": "…"}]`, both required, the reason not
    ///   empty: patterns of `userAgents` or of a list, exactly as written there, that app
    ///   events are not judged by (`AppExemption`). A pattern the rule set does not have, or
    ///   one exempted twice, refuses the document.
    /// - `ipRanges`: CIDR ranges or addresses (`CIDRRange`).
    /// - `ipRangeFiles`: file names; one range a line, `#` starts a comment, blank lines and
    ///   spaces around a range are ignored.
    /// - `maxClicksPerAd`, `maxEventsPerClientMinute`: integers from 1 to 2 147 483 647.
    /// - `sources`: the names of the files read into the rule set. Activation appends the
    ///   lists and range files it reads; the member itself is for a stored document activated
    ///   again, which keeps them. It labels nothing.
    ///
    /// `null` is the same as absent. A member not in this list, or given twice, refuses the
    /// document: a misspelt rule must not be silently off. Every pattern is compiled, so one
    /// that `UserAgentMatcher` cannot use refuses the whole rule set. Patterns are kept in
    /// order: the document's own, then each list's; ranges likewise; `sources` records the
    /// files read.
    ///
    /// - Parameters:
    ///   - document: the document's bytes (UTF-8 JSON).
    ///   - readFile: reads a file by its name as the document wrote it (the caller resolves it
    ///     relative to the document); an error it throws is reported with the field and file.
    /// - Throws: `RuleSetError`, saying which field, index, file, line or pattern is wrong and how.
    public static func parse(_ document: [UInt8], readFile: (String) throws -> [UInt8]) throws(RuleSetError) -> IVTRuleSet {
        try read(document, fields: activationFields, readFile: readFile)
    }

    /// Reads back what `storedDocument` wrote (the same rules as `parse`, no files).
    ///
    /// - Parameters:
    ///   - bytes: a stored document.
    /// - Throws: `RuleSetError` when it is not one.
    public static func parseStored(_ bytes: [UInt8]) throws(RuleSetError) -> IVTRuleSet {
        // Its fields name no file, so nothing is read.
        try read(bytes, fields: storedFields, readFile: { _ in [] })
    }

    /// The rule set as one self-contained JSON document, for the database and `tracker ivt
    /// show`: every pattern and range inlined, members in a fixed order, one pattern, exemption
    /// or range a line, absent limits and name and no exemptions left out. The same rule set always gives the same bytes,
    /// and `parseStored` gives back an equal rule set.
    public var storedDocument: String {
        var out = "{\n"
        var members: [String] = []
        if let name { members.append("  \"name\": " + RuleSetError.quoted(name)) }
        members.append("  \"sources\": " + Self.array(sources.map(RuleSetError.quoted)))
        members.append("  \"userAgents\": " + Self.array(userAgents.map { rule in
            "{\"pattern\": " + RuleSetError.quoted(rule.pattern) + (rule.name.map { ", \"name\": " + RuleSetError.quoted($0) } ?? "") + "}"
        }))
        if !appExemptions.isEmpty {
            members.append("  \"appExemptions\": " + Self.array(appExemptions.map { exemption in
                "{\"pattern\": " + RuleSetError.quoted(exemption.pattern) + ", \"reason\": " + RuleSetError.quoted(exemption.reason) + "}"
            }))
        }
        members.append("  \"ipRanges\": " + Self.array(ipRanges.map { RuleSetError.quoted($0.description) }))
        if let maxClicksPerAd { members.append("  \"maxClicksPerAd\": \(maxClicksPerAd)") }
        if let maxEventsPerClientMinute { members.append("  \"maxEventsPerClientMinute\": \(maxEventsPerClientMinute)") }
        out += members.joined(separator: ",\n")
        out += "\n}\n"
        return out
    }

    private static func array(_ elements: [String]) -> String {
        elements.isEmpty ? "[]" : "[\n    " + elements.joined(separator: ",\n    ") + "\n  ]"
    }

    // MARK: Reading

    private static func read(_ bytes: [UInt8], fields allowed: [String], readFile: (String) throws -> [UInt8]) throws(RuleSetError) -> IVTRuleSet {
        let value: JSONValue
        do {
            value = try JSONReader.parse(bytes)
        } catch {
            throw .notJSON(source: "the document", error)
        }
        let fields = try members(of: value, location: "the document", allowed: allowed)
        var rules = IVTRuleSet()
        // Where each pattern came from, for the compiler's error.
        var origins: [String] = []

        if let v = fields["name"] { rules.name = try string(v, location: "name") }
        if let v = fields["sources"] {
            for (i, element) in try array(v, location: "sources").enumerated() {
                rules.sources.append(try string(element, location: "sources[\(i)]"))
            }
        }
        if let v = fields["userAgents"] {
            for (i, element) in try array(v, location: "userAgents").enumerated() {
                let location = "userAgents[\(i)]"
                let entry = try members(of: element, location: location, allowed: ["pattern", "name"])
                guard let pattern = entry["pattern"] else { throw .missingField(location: location, name: "pattern") }
                var name: String?
                if let v = entry["name"] { name = try string(v, location: location + ".name") }
                rules.userAgents.append(UserAgentRule(pattern: try string(pattern, location: location + ".pattern"), name: name))
                origins.append(location)
            }
        }
        if let v = fields["userAgentLists"] {
            for (i, element) in try array(v, location: "userAgentLists").enumerated() {
                let file = try string(element, location: "userAgentLists[\(i)]")
                let location = "userAgentLists[\(i)] (\(file))"
                let fileBytes = try contents(of: file, location: location, readFile: readFile)
                let list: JSONValue
                do {
                    list = try JSONReader.parse(fileBytes)
                } catch {
                    throw .notJSON(source: location, error)
                }
                guard case .array(let entries) = list else {
                    throw .wrongType(location: location, expected: "a JSON array of objects with a \"pattern\"", got: list.typeName)
                }
                for (j, entry) in entries.enumerated() {
                    let entryLocation = "\(location) entry \(j)"
                    guard case .object = entry else {
                        throw .wrongType(location: entryLocation, expected: "an object with a \"pattern\"", got: entry.typeName)
                    }
                    guard let pattern = entry.member("pattern") else { throw .missingField(location: entryLocation, name: "pattern") }
                    rules.userAgents.append(UserAgentRule(pattern: try string(pattern, location: entryLocation + ": pattern")))
                    origins.append(entryLocation)
                }
                rules.sources.append(file)
            }
        }
        if let v = fields["appExemptions"] {
            rules.appExemptions = try exemptions(v, of: rules.userAgents)
        }
        if let v = fields["ipRanges"] {
            for (i, element) in try array(v, location: "ipRanges").enumerated() {
                let location = "ipRanges[\(i)]"
                let text = try string(element, location: location)
                do {
                    rules.ipRanges.append(try CIDRRange.parse(text))
                } catch {
                    throw .invalidRange(location: location, error)
                }
            }
        }
        if let v = fields["ipRangeFiles"] {
            for (i, element) in try array(v, location: "ipRangeFiles").enumerated() {
                let file = try string(element, location: "ipRangeFiles[\(i)]")
                let location = "ipRangeFiles[\(i)] (\(file))"
                rules.ipRanges += try ranges(in: try contents(of: file, location: location, readFile: readFile), location: location)
                rules.sources.append(file)
            }
        }
        if let v = fields["maxClicksPerAd"] { rules.maxClicksPerAd = try limit(v, field: "maxClicksPerAd") }
        if let v = fields["maxEventsPerClientMinute"] { rules.maxEventsPerClientMinute = try limit(v, field: "maxEventsPerClientMinute") }

        do {
            _ = try UserAgentMatcher(patterns: rules.userAgents.map(\.pattern))
        } catch {
            throw .invalidPattern(location: origins.indices.contains(error.index) ? origins[error.index] : "userAgents[\(error.index)]", error)
        }
        return rules
    }

    /// The `appExemptions` member: each names a pattern of `patterns` once, and says why.
    private static func exemptions(_ value: JSONValue, of patterns: [UserAgentRule]) throws(RuleSetError) -> [AppExemption] {
        let known = Set(patterns.map(\.pattern))
        var first: [String: String] = [:]
        var out: [AppExemption] = []
        for (i, element) in try array(value, location: "appExemptions").enumerated() {
            let location = "appExemptions[\(i)]"
            let entry = try members(of: element, location: location, allowed: ["pattern", "reason"])
            guard let pattern = entry["pattern"] else { throw .missingField(location: location, name: "pattern") }
            guard let reason = entry["reason"] else { throw .missingField(location: location, name: "reason") }
            let exemption = AppExemption(pattern: try string(pattern, location: location + ".pattern"),
                                         reason: try string(reason, location: location + ".reason"))
            guard !exemption.reason.isEmpty else {
                throw .wrongType(location: location + ".reason", expected: "a non-empty string saying why", got: "an empty string")
            }
            guard known.contains(exemption.pattern) else { throw .notAPattern(location: location + ".pattern", pattern: exemption.pattern) }
            if let earlier = first[exemption.pattern] {
                throw .repeatedExemption(location: location + ".pattern", pattern: exemption.pattern, first: earlier)
            }
            first[exemption.pattern] = location
            out.append(exemption)
        }
        return out
    }

    /// The members of an object by name, `null` ones left out; refuses other types, unknown
    /// names and repeated ones.
    private static func members(of value: JSONValue, location: String, allowed: [String]) throws(RuleSetError) -> [String: JSONValue] {
        guard case .object(let members) = value else {
            throw .wrongType(location: location, expected: "a JSON object", got: value.typeName)
        }
        let context = location == "the document" ? "" : location
        var fields: [String: JSONValue] = [:]
        var seen = Set<String>()
        for (key, member) in members {
            guard allowed.contains(key) else { throw .unknownField(location: context, name: key, allowed: allowed) }
            guard seen.insert(key).inserted else { throw .repeatedField(location: context, name: key) }
            if case .null = member { continue }
            fields[key] = member
        }
        return fields
    }

    private static func string(_ value: JSONValue, location: String) throws(RuleSetError) -> String {
        guard case .string(let s) = value else { throw .wrongType(location: location, expected: "a string", got: value.typeName) }
        return s
    }

    private static func array(_ value: JSONValue, location: String) throws(RuleSetError) -> [JSONValue] {
        guard case .array(let elements) = value else { throw .wrongType(location: location, expected: "an array", got: value.typeName) }
        return elements
    }

    private static func limit(_ value: JSONValue, field: String) throws(RuleSetError) -> Int {
        guard case .number(let text) = value else {
            let shown = if case .string(let s) = value { RuleSetError.quoted(s) } else { value.typeName }
            throw .notPositiveInteger(field: field, got: shown)
        }
        // JSON already refuses leading zeros; a fraction or an exponent is no integer here.
        guard text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), text.utf8.count <= 10, let n = Int(text), n >= 1, n <= maxLimit else {
            throw .notPositiveInteger(field: field, got: text)
        }
        return n
    }

    private static func contents(of file: String, location: String, readFile: (String) throws -> [UInt8]) throws(RuleSetError) -> [UInt8] {
        do {
            return try readFile(file)
        } catch {
            throw .unreadableFile(location: location, reason: "\(error)")
        }
    }

    /// The ranges of a file: one a line, `#` to the end of the line is a comment, spaces,
    /// tabs and a carriage return around a range are ignored, and so are blank lines.
    private static func ranges(in bytes: [UInt8], location: String) throws(RuleSetError) -> [CIDRRange] {
        guard let text = JSONReader.validString(bytes, isASCII: !bytes.contains { $0 >= 0x80 }) else {
            throw .notText(location: location)
        }
        var ranges: [CIDRRange] = []
        // Split on the byte: "\r\n" is one Character, so a split on Characters misses it.
        for (n, rawLine) in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            let content = Substring(rawLine).prefix { $0 != "#" }
            let trimmed = content.drop { " \t\r".contains($0) }.reversed().drop { " \t\r".contains($0) }.reversed()
            guard !trimmed.isEmpty else { continue }
            do {
                ranges.append(try CIDRRange.parse(String(trimmed)))
            } catch {
                throw .invalidRange(location: "\(location) line \(n + 1)", error)
            }
        }
        return ranges
    }
}

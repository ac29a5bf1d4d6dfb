import TrackerPostgres

extension NetworkScope {
    /// The scope's codes as a text array parameter (`{6499,21775744923}`: digits need no quoting).
    var arrayParameter: Parameter { .text("{" + codes.joined(separator: ",") + "}") }
}

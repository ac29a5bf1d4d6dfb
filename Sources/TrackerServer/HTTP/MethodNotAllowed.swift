import HTTPTypes
import Hummingbird

/// `405 method_not_allowed` with `Allow` when a path the router knows is asked with a method
/// it does not offer (RFC 9110, 15.5.6): a client that sends `PUT /v1/events` learns to send
/// `POST`, where a `404` would say the endpoint does not exist. Unknown paths stay `404`.
///
/// Added after every route, so it only wraps the router's not-found answer; its table is the
/// router's own list of routes, so a new route needs nothing here.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Each route's path split in segments (`nil` for a `{capture}`), with its methods.
    let routes: [(segments: [Substring?], methods: [HTTPRequest.Method])]

    init(routes: [Router<Context>.RouteDescription]) {
        var byPath: [String: [HTTPRequest.Method]] = [:]
        for route in routes {
            byPath["\(route.path)", default: []].append(route.method)
            // The router answers HEAD for every GET (autoGenerateHeadEndpoints, at build time).
            if route.method == .get { byPath["\(route.path)", default: []].append(.head) }
        }
        self.routes = byPath.sorted { $0.key < $1.key }.map { path, methods in
            (Self.segments(path).map { $0.first == "{" ? nil : $0 }, methods.sorted { $0.rawValue < $1.rawValue })
        }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let allowed = Self.methods(for: request.uri.path, in: routes)
            guard !allowed.isEmpty, !allowed.contains(request.method) else { throw error }
            let allow = allowed.map(\.rawValue).joined(separator: ", ")
            throw APIError(.methodNotAllowed, "\(request.uri.path) answers \(allow) only, not \(request.method.rawValue)",
                           headers: [.allow: allow])
        }
    }

    static func methods(for path: String, in routes: [(segments: [Substring?], methods: [HTTPRequest.Method])]) -> [HTTPRequest.Method] {
        let asked = segments(path)
        return routes.first { route in
            route.segments.count == asked.count && zip(route.segments, asked).allSatisfy { $0 == nil ? !$1.isEmpty : $0 == $1 }
        }?.methods ?? []
    }

    private static func segments(_ path: String) -> [Substring] {
        path.split(separator: "/", omittingEmptySubsequences: true)
    }
}

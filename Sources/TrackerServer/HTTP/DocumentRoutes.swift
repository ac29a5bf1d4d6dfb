import Hummingbird

/// `GET /openapi.yaml`: the HTTP contract (docs/openapi.yaml as built into the binary), no key,
/// so a client generator or a contract test can ask the server it talks to.
struct DocumentRoutes: Sendable {
    let document = StaticAsset(text: EmbeddedFile.openAPIDocument.text,
                               mediaType: "application/yaml; charset=utf-8", cacheControl: "no-cache")

    func register(on router: Router<some RequestContext>) {
        router.get("/openapi.yaml") { request, _ in
            document.response(to: request)
        }
    }
}

import Testing
import Tracker
@testable import TrackerServer

/// The two header readers every ingest request goes through, read as bytes.
struct HeaderParsingTests {
    @Test func aBearerKeyIsReadInAnyCaseWithSpacesAroundIt() {
        #expect(APIKeys.bearerKey("Bearer trk_abc") == "trk_abc")
        #expect(APIKeys.bearerKey("bearer trk_abc") == "trk_abc")
        #expect(APIKeys.bearerKey("BEARER   trk_abc \t") == "trk_abc")
        #expect(APIKeys.bearerKey("  Bearer trk_abc") == "trk_abc")
        #expect(APIKeys.bearerKey("Bearer  ") == "", "spaces after the scheme: an empty key, refused as unknown")
    }

    @Test func anotherSchemeOrNoSpaceAfterTheSchemeIsNoBearerKey() {
        #expect(APIKeys.bearerKey("Basic dXNlcjpwYXNz") == nil)
        #expect(APIKeys.bearerKey("Bearer") == nil)
        #expect(APIKeys.bearerKey("Bearer ") == nil)
        #expect(APIKeys.bearerKey("Bearer\ttrk_abc") == nil)
        #expect(APIKeys.bearerKey("Bearertrk_abc") == nil)
        #expect(APIKeys.bearerKey("Béarer trk_abc") == nil)
        #expect(APIKeys.bearerKey("") == nil)
    }

    @Test func jsonIsTheMediaTypeInAnyCaseWithOrWithoutParameters() {
        for value in ["application/json", "Application/JSON", "application/json; charset=utf-8", " application/json ;charset=UTF-8", "application/json\t"] {
            #expect(IngestRoute.isJSON(value), "\(value)")
        }
        for value in ["text/plain", "application/jsonx", "application/json-seq", "application/x-json", "application", "", ";application/json", "application/jsön"] {
            #expect(!IngestRoute.isJSON(value), "\(value)")
        }
    }
}

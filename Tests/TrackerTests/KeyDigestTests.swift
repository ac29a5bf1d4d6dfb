import Testing
@testable import Tracker

struct KeyDigestTests {
    /// The digest is the standard SHA-256 (FIPS 180-4's examples, lengths around the padding
    /// boundary), as PostgreSQL's sha256() stored it for keys created before hashing moved here.
    @Test func digestsAreTheStandardSHA256() {
        func hex(_ text: String) -> String { KeyDigest(key: text).bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined() }
        #expect(hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(hex(String(repeating: "a", count: 55)) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318")
        #expect(hex(String(repeating: "a", count: 64)) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb")
    }

    @Test func digestsRoundTripThroughPostgresHexText() {
        let digest = KeyDigest(key: "trk_example")
        #expect(digest.byteaText.hasPrefix(#"\x"#) && digest.byteaText.utf8.count == 66)
        #expect(KeyDigest(byteaText: digest.byteaText) == digest)
        #expect(KeyDigest(byteaText: #"\xzz"#) == nil)
        #expect(KeyDigest(key: "trk_other") != digest)
    }
}

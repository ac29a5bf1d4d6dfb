import Testing
@testable import Tracker

// PROTOCOL.md section 5, rule by rule, on AdContribution: what one ad's events add to the reports.

/// 2026-11-20 10:00:00 UTC: the moment the tests' ads are served.
private let t0 = Day(year: 2026, month: 11, day: 20)!.start + .seconds(10 * 3600)
private let unit = "/1234/home/native"
private let format = "10063170"

/// One ad (one requestId) under construction; every event gets the next id, so a later
/// call has the larger id unless `id:` says otherwise.
private struct Ad {
    var events: [AdEvent] = []

    mutating func add(_ type: EventType, _ offset: Duration, id: Int? = nil, asset: String? = nil,
                      source: EventSource = .app, adapter: String? = nil, adUnit: String = unit,
                      formatId: String = format, eea: Bool = false, reservation: Bool = false, test: Bool = false) {
        events.append(AdEvent(id: eventID(id ?? events.count + 1), type: type, correctedAt: t0 + offset, adUnit: adUnit,
                              formatId: formatId, assetKey: asset, source: source, adapter: adapter, eea: eea,
                              reservation: reservation, test: test))
    }

    mutating func loaded(_ at: Duration = .zero) { add(.adLoaded, at) }
    mutating func impression(_ at: Duration = .zero, id: Int? = nil, source: EventSource = .app, adapter: String? = nil,
                             adUnit: String = unit, eea: Bool = false, reservation: Bool = false, test: Bool = false) {
        add(.impression, at, id: id, source: source, adapter: adapter, adUnit: adUnit, eea: eea, reservation: reservation, test: test)
    }
    mutating func click(_ asset: String = "MainImage", _ at: Duration, id: Int? = nil, source: EventSource = .app,
                        adapter: String? = nil, test: Bool = false) {
        add(.click, at, id: id, asset: asset, source: source, adapter: adapter, test: test)
    }
}

private func eventID(_ n: Int) -> PackedUUID {
    let digits = String(n)
    return PackedUUID("00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - digits.count) + digits)!
}

/// The sums of a contribution's rows of one table, as a report leaving test traffic out
/// (or including it) would add them up; optionally only the rows of one day.
private struct Totals {
    var format = Measures(), asset = Measures(), source = Measures(), ivt = Measures(), funnel = Measures(), failure = Measures(),
        waterfall = Measures()

    init(_ c: Contribution, includeTest: Bool = false, day: Day? = nil, adapter: String? = nil, assetKey: String? = nil) {
        let classes = TrafficClass.classes(includeTest: includeTest)
        for (key, m) in c.rows where classes.contains(key.trafficClass) && (day == nil || key.quarterHour.day == day) {
            switch key.table {
            case .format: format &+= m
            case .asset: if assetKey == nil || key.assetKey == assetKey { asset &+= m }
            case .source: if adapter == nil || key.adapter == adapter { source &+= m }
            case .ivt: ivt &+= m
            case .funnel: funnel &+= m
            case .failure: failure &+= m
            case .waterfall: waterfall &+= m
            }
        }
    }

    var impressions: Int64 { format[FormatMeasure.impressions] }
    var duplicateImpressions: Int64 { format[FormatMeasure.duplicateImpressions] }
    var staleImpressions: Int64 { format[FormatMeasure.staleImpressions] }
    var clicks: Int64 { format[FormatMeasure.clicks] }
    var duplicateClicks: Int64 { format[FormatMeasure.duplicateClicks] }
    var attributedClicks: Int64 { format[FormatMeasure.attributedClicks] }
    var adchoicesImpressions: Int64 { format[FormatMeasure.adchoicesImpressions] }
    var adchoicesClicks: Int64 { format[FormatMeasure.adchoicesClicks] }
    var videoPlays: Int64 { format[FormatMeasure.videoPlays] }
    var videoEnds: Int64 { format[FormatMeasure.videoEnds] }
    var eeaReservationImpressions: Int64 { format[FormatMeasure.eeaReservationImpressions] }
    var withAdChoices: Int64 { format[FormatMeasure.withAdChoices] }
    var assetClicks: Int64 { asset[AssetMeasure.clicks] }
    var assetDuplicateClicks: Int64 { asset[AssetMeasure.duplicateClicks] }
    var assetAttributed: Int64 { asset[AssetMeasure.attributedClicks] }
    var noImpression: Int64 { asset[AssetMeasure.noImpression] }
    var beforeImpression: Int64 { asset[AssetMeasure.beforeImpression] }
    var outsideWindow: Int64 { asset[AssetMeasure.outsideWindow] }
    var appImpressions: Int64 { source[SourceMeasure.appImpressions] }
    var sdkImpressions: Int64 { source[SourceMeasure.sdkImpressions] }
    var mediationImpressions: Int64 { source[SourceMeasure.mediationImpressions] }
    var doubleTrackedImpressionAds: Int64 { source[SourceMeasure.doubleTrackedImpressionAds] }
    var doubleTrackedClickAds: Int64 { source[SourceMeasure.doubleTrackedClickAds] }
}

private func totals(_ ad: Ad, window: Duration = .seconds(3600), includeTest: Bool = false, day: Day? = nil,
                    adapter: String? = nil, assetKey: String? = nil) -> Totals {
    Totals(AdContribution(attributionWindow: window).contribution(of: ad.events), includeTest: includeTest, day: day,
           adapter: adapter, assetKey: assetKey)
}

private func rowKeys(_ ad: Ad, _ table: ProjectionTable) -> Set<ProjectionKey> {
    Set(AdContribution().contribution(of: ad.events).rows.keys.filter { $0.table == table })
}

@Suite struct ImpressionRules {
    @Test func anAdHasAtMostOneCountedImpressionAndTheRestAreDuplicates() {
        var ad = Ad()
        ad.impression(.zero)
        ad.impression(.seconds(2))
        ad.impression(.seconds(5), source: .sdk)
        let t = totals(ad)
        #expect(t.impressions == 1)
        #expect(t.duplicateImpressions == 2)
    }

    @Test func theEarliestImpressionByCorrectedTimeIsTheCountedOne() {
        var ad = Ad()
        ad.impression(.seconds(10), adUnit: "/1234/late/native")
        ad.impression(.seconds(3), adUnit: "/1234/early/native")
        let keys = rowKeys(ad, .format)
        let counted = AdContribution().contribution(of: ad.events).rows
            .first { $0.key.table == .format && $0.value[FormatMeasure.impressions] == 1 }
        #expect(counted?.key.adUnit == "/1234/early/native")
        #expect(keys.count == 2)
    }

    @Test func impressionsAtTheSameInstantAreBrokenByTheSmallerIdAsAString() {
        var ad = Ad()
        ad.impression(.zero, id: 20, adUnit: "/1234/b/native")
        ad.impression(.zero, id: 3, adUnit: "/1234/a/native")
        // "…0003" < "…0020" as strings: the impression with id 3 is counted.
        let rows = AdContribution().contribution(of: ad.events).rows
        #expect(rows.first { $0.key.table == .format && $0.key.adUnit == "/1234/a/native" }?.value[FormatMeasure.impressions] == 1)
        #expect(rows.first { $0.key.table == .format && $0.key.adUnit == "/1234/b/native" }?.value[FormatMeasure.duplicateImpressions] == 1)
    }

    @Test func idTiesCompareAsLowerCaseTextNotAsNumbers() {
        // "…00a0" > "…0099" as text (a > 9), so the id ending 0099 wins the tie.
        var ad = Ad()
        ad.events.append(AdEvent(id: PackedUUID("00000000-0000-4000-8000-0000000000A0")!, type: .impression,
                                 correctedAt: t0, adUnit: "/1234/hex/native", formatId: format))
        ad.events.append(AdEvent(id: PackedUUID("00000000-0000-4000-8000-000000000099")!, type: .impression,
                                 correctedAt: t0, adUnit: "/1234/dec/native", formatId: format))
        let rows = AdContribution().contribution(of: ad.events).rows
        #expect(rows.first { $0.key.table == .format && $0.key.adUnit == "/1234/dec/native" }?.value[FormatMeasure.impressions] == 1)
    }

    @Test func impressionMoreThanOneHourAfterLoadIsStaleAndStillCounted() {
        var ad = Ad()
        ad.loaded(.zero)
        ad.impression(.seconds(3600) + .microseconds(1))
        let t = totals(ad)
        #expect(t.impressions == 1)
        #expect(t.staleImpressions == 1)
    }

    @Test func impressionExactlyOneHourAfterLoadIsNotStale() {
        var ad = Ad()
        ad.loaded(.zero)
        ad.impression(.seconds(3600))
        #expect(totals(ad).staleImpressions == 0)
    }

    @Test func stalenessIsMeasuredFromTheEarliestAdLoaded() {
        var ad = Ad()
        ad.loaded(.seconds(1800))
        ad.loaded(.zero)
        ad.impression(.seconds(3601))
        #expect(totals(ad).staleImpressions == 1)
    }

    @Test func stalenessIsJudgedOnTheCountedImpressionNotOnDuplicates() {
        var ad = Ad()
        ad.loaded(.zero)
        ad.impression(.seconds(60))
        ad.impression(.seconds(7200))
        let t = totals(ad)
        #expect(t.staleImpressions == 0)
        #expect(t.duplicateImpressions == 1)
    }

    @Test func anImpressionWithoutAdLoadedIsNeverStale() {
        var ad = Ad()
        ad.impression(.seconds(99_999))
        #expect(totals(ad).staleImpressions == 0)
    }

    @Test func theCountedImpressionAndItsDuplicatesCountUnderTheirOwnDays() {
        var ad = Ad()
        ad.impression(.seconds(14 * 3600 - 1))  // 23:59:59 on the 20th
        ad.impression(.seconds(14 * 3600))  // 00:00:00 on the 21st
        let day20 = Day(year: 2026, month: 11, day: 20)!, day21 = Day(year: 2026, month: 11, day: 21)!
        #expect(totals(ad, day: day20).impressions == 1)
        #expect(totals(ad, day: day20).duplicateImpressions == 0)
        #expect(totals(ad, day: day21).impressions == 0)
        #expect(totals(ad, day: day21).duplicateImpressions == 1)
    }
}

@Suite struct ClickAttributionRules {
    @Test func clickWithinTheWindowAfterImpressionIsAttributed() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(30))
        let t = totals(ad)
        #expect(t.clicks == 1)
        #expect(t.attributedClicks == 1)
        #expect(t.assetAttributed == 1)
        #expect(t.noImpression + t.beforeImpression + t.outsideWindow == 0)
    }

    @Test func clickOneSecondBeforeImpressionIsAttributed() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(-1))
        #expect(totals(ad).attributedClicks == 1)
    }

    @Test func clickMoreThanOneSecondBeforeImpressionIsUnattributedBeforeImpression() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(-1) - .microseconds(1))
        let t = totals(ad)
        #expect(t.clicks == 1)
        #expect(t.attributedClicks == 0)
        #expect(t.beforeImpression == 1)
    }

    @Test func clickExactlyAtTheEndOfTheWindowIsAttributed() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(3600))
        #expect(totals(ad).attributedClicks == 1)
    }

    @Test func clickAfterTheWindowIsUnattributedOutsideWindow() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(3600) + .microseconds(1))
        let t = totals(ad)
        #expect(t.attributedClicks == 0)
        #expect(t.outsideWindow == 1)
    }

    @Test func clickOfAnAdWithoutImpressionIsUnattributedNoImpression() {
        var ad = Ad()
        ad.loaded(.zero)
        ad.click("Headline", .seconds(5))
        let t = totals(ad)
        #expect(t.clicks == 1)
        #expect(t.noImpression == 1)
        #expect(t.attributedClicks == 0)
    }

    @Test func aConfiguredAttributionWindowReplacesTheHour() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(45 * 60))
        #expect(totals(ad, window: .seconds(30 * 60)).outsideWindow == 1)
        #expect(totals(ad, window: .seconds(3600)).attributedClicks == 1)
    }

    @Test func clicksAreJudgedAgainstTheCountedImpressionNotADuplicate() {
        var ad = Ad()
        ad.impression(.zero)
        ad.impression(.seconds(7200))  // a duplicate; the click is 1 h 30 after the counted one
        ad.click("MainImage", .seconds(5400))
        #expect(totals(ad).outsideWindow == 1)
    }

    @Test func lateImpressionAttributesTheClickThatArrivedBeforeIt() {
        var ad = Ad()
        ad.click("MainImage", .seconds(2))
        let before = totals(ad)
        ad.impression(.zero)
        let after = totals(ad)
        #expect(before.noImpression == 1)
        #expect(after.noImpression == 0)
        #expect(after.attributedClicks == 1)
    }

    @Test func clickAfterMidnightIsAttributedToTheImpressionBeforeItAndCountedUnderItsOwnDay() {
        var ad = Ad()
        ad.impression(.seconds(14 * 3600) - .milliseconds(400))  // 23:59:59.600 on the 20th
        ad.click("MainImage", .seconds(14 * 3600) + .milliseconds(300))  // 00:00:00.300 on the 21st
        let day20 = totals(ad, day: Day(year: 2026, month: 11, day: 20)!)
        let day21 = totals(ad, day: Day(year: 2026, month: 11, day: 21)!)
        #expect(day20.impressions == 1)
        #expect(day20.clicks == 0)
        #expect(day21.impressions == 0)
        #expect(day21.clicks == 1)
        #expect(day21.attributedClicks == 1)
    }

    @Test func clickExactlyAtMidnightBelongsToTheNewDay() {
        var ad = Ad()
        ad.impression(.seconds(14 * 3600) - .microseconds(1))
        ad.click("MainImage", .seconds(14 * 3600))
        #expect(totals(ad, day: Day(year: 2026, month: 11, day: 21)!).clicks == 1)
        #expect(totals(ad, day: Day(year: 2026, month: 11, day: 20)!).clicks == 0)
    }

    @Test func clicksCountPerAssetKey() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(5))
        ad.click("Headline", .seconds(5))
        ad.click("Headline", .seconds(20))
        #expect(totals(ad, assetKey: "MainImage").assetClicks == 1)
        #expect(totals(ad, assetKey: "Headline").assetClicks == 2)
        #expect(totals(ad).clicks == 3)
    }
}

@Suite struct DuplicateClickRules {
    @Test func secondClickWithinOneSecondOnTheSameAssetIsADuplicateClick() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(10))
        ad.click("MainImage", .seconds(11))
        let t = totals(ad)
        #expect(t.clicks == 1)
        #expect(t.duplicateClicks == 1)
        #expect(t.assetDuplicateClicks == 1)
        #expect(t.attributedClicks == 1)
    }

    @Test func assetKeysThatDifferOnlyInTheirBytesAreTwoAssets() {
        // The same text to Swift's `==` (é, and e with a combining accent), two keys to the
        // reports, which keep values apart by their bytes as PostgreSQL does.
        var ad = Ad()
        ad.impression(.zero)
        ad.click("caf\u{E9}", .seconds(10))
        ad.click("cafe\u{301}", .seconds(10) + .milliseconds(500))
        let t = totals(ad)
        #expect(t.clicks == 2)
        #expect(t.duplicateClicks == 0)
        #expect(rowKeys(ad, .asset).count == 2)
    }

    @Test func secondClickMoreThanOneSecondLaterIsCounted() {
        var ad = Ad()
        ad.impression(.zero)
        ad.click("MainImage", .seconds(10))
        ad.click("MainImage", .seconds(11) + .microseconds(1))
        let t = totals(ad)
        #expect(t.clicks == 2)
        #expect(t.duplicateClicks == 0)
    }

    @Test func duplicateGapIsMeasuredFromTheLastCountedClickNotTheLastDuplicate() {
        var ad = Ad()
        ad.click("MainImage", .zero)
        ad.click("MainImage", .milliseconds(800))  // duplicate of the first
        ad.click("MainImage", .milliseconds(1600))  // 1.6 s after the counted one: counted
        let t = totals(ad)
        #expect(t.clicks == 2)
        #expect(t.duplicateClicks == 1)
    }

    @Test func clicksAtTheSameInstantOnTheSameAssetCountOnceThenDuplicate() {
        var ad = Ad()
        ad.click("MainImage", .zero, source: .app)
        ad.click("MainImage", .zero, source: .sdk)
        let t = totals(ad)
        #expect(t.clicks == 1)
        #expect(t.duplicateClicks == 1)
    }

    @Test func quickClicksOnDifferentAssetsAreNotDuplicates() {
        var ad = Ad()
        ad.click("MainImage", .zero)
        ad.click("Headline", .milliseconds(200))
        let t = totals(ad)
        #expect(t.clicks == 2)
        #expect(t.duplicateClicks == 0)
    }

    @Test func duplicateClicksAreNeverAttributedNorUnattributed() {
        var ad = Ad()
        ad.click("MainImage", .zero)
        ad.click("MainImage", .milliseconds(500))
        let t = totals(ad)
        #expect(t.clicks == 1)
        #expect(t.noImpression == 1)
        #expect(t.assetClicks == 1)
    }

    @Test func theEarlierOfTwoTiedClicksBySmallerIdIsTheCountedOne() {
        // Both at the same instant: the smaller id is counted; its day decides where `clicks` goes.
        var ad = Ad()
        ad.add(.click, .zero, id: 9, asset: "MainImage", adUnit: "/1234/b/native")
        ad.add(.click, .zero, id: 2, asset: "MainImage", adUnit: "/1234/a/native")
        let rows = AdContribution().contribution(of: ad.events).rows
        #expect(rows.first { $0.key.table == .format && $0.key.adUnit == "/1234/a/native" }?.value[FormatMeasure.clicks] == 1)
        #expect(rows.first { $0.key.table == .format && $0.key.adUnit == "/1234/b/native" }?.value[FormatMeasure.duplicateClicks] == 1)
    }
}

@Suite struct DoubleTrackingRules {
    @Test func impressionsFromTwoSourcesMakeTheAdDoubleTracked() {
        var ad = Ad()
        ad.impression(.zero, source: .app)
        ad.impression(.milliseconds(50), source: .mediation, adapter: "AppLovin")
        let t = totals(ad)
        #expect(t.doubleTrackedImpressionAds == 1)
        #expect(t.appImpressions == 1)
        #expect(t.mediationImpressions == 1)
    }

    @Test func doubleTrackedImpressionAdCountsUnderTheCountedImpressionsAdapter() {
        var ad = Ad()
        ad.impression(.zero, source: .mediation, adapter: "AppLovin")
        ad.impression(.seconds(1), source: .app)
        #expect(totals(ad, adapter: "AppLovin").doubleTrackedImpressionAds == 1)
        #expect(totals(ad, adapter: "").doubleTrackedImpressionAds == 0)
        #expect(totals(ad, adapter: "").appImpressions == 1)
    }

    @Test func repeatedImpressionsFromOneSourceAreDuplicatesButNotDoubleTracked() {
        var ad = Ad()
        ad.impression(.zero, source: .sdk)
        ad.impression(.seconds(1), source: .sdk)
        let t = totals(ad)
        #expect(t.doubleTrackedImpressionAds == 0)
        #expect(t.sdkImpressions == 2)
        #expect(t.duplicateImpressions == 1)
    }

    @Test func clicksFromTwoSourcesIncludingDuplicatesMakeTheAdDoubleTrackedUnderItsEarliestClick() {
        var ad = Ad()
        ad.click("MainImage", .zero, source: .app, adapter: "Meta")
        ad.click("MainImage", .milliseconds(100), source: .mediation, adapter: "Meta")  // a duplicate click
        let t = totals(ad)
        #expect(t.doubleTrackedClickAds == 1)
        #expect(t.duplicateClicks == 1)
        #expect(totals(ad, adapter: "Meta").doubleTrackedClickAds == 1)
    }

    @Test func doubleTrackedClickAdCountsOnTheDayOfTheEarliestClick() {
        var ad = Ad()
        ad.click("MainImage", .seconds(14 * 3600) - .seconds(1), source: .app)
        ad.click("Headline", .seconds(14 * 3600) + .seconds(5), source: .sdk)
        #expect(totals(ad, day: Day(year: 2026, month: 11, day: 20)!).doubleTrackedClickAds == 1)
        #expect(totals(ad, day: Day(year: 2026, month: 11, day: 21)!).doubleTrackedClickAds == 0)
    }

    @Test func absentAdapterIsTheEmptyStringInTheSourcesRows() {
        var ad = Ad()
        ad.impression(.zero)
        #expect(rowKeys(ad, .source).map(\.adapter) == [""])
    }
}

@Suite struct AdChoicesAndVideoRules {
    @Test func adchoicesImpressionsAreCountedOncePerAdUnderTheEarliest() {
        var ad = Ad()
        ad.add(.adchoicesImpression, .seconds(14 * 3600) + .seconds(2))
        ad.add(.adchoicesImpression, .seconds(14 * 3600) - .seconds(2))
        #expect(totals(ad, day: Day(year: 2026, month: 11, day: 20)!).adchoicesImpressions == 1)
        #expect(totals(ad, day: Day(year: 2026, month: 11, day: 21)!).adchoicesImpressions == 0)
    }

    @Test func adchoicesClicksCountPerEventAndNeverAsAdClicks() {
        var ad = Ad()
        ad.impression(.zero)
        ad.add(.adchoicesClick, .seconds(3))
        ad.add(.adchoicesClick, .seconds(3) + .milliseconds(100))
        let t = totals(ad)
        #expect(t.adchoicesClicks == 2)
        #expect(t.clicks == 0)
        #expect(t.duplicateClicks == 0)
    }

    @Test func eeaReservationImpressionWithAdChoicesIconCountsTowardTheShare() {
        var ad = Ad()
        ad.impression(.zero, eea: true, reservation: true)
        ad.add(.adchoicesImpression, .seconds(1))
        let t = totals(ad)
        #expect(t.eeaReservationImpressions == 1)
        #expect(t.withAdChoices == 1)
    }

    @Test func eeaReservationImpressionWithoutAdChoicesIconLowersTheShare() {
        var ad = Ad()
        ad.impression(.zero, eea: true, reservation: true)
        let t = totals(ad)
        #expect(t.eeaReservationImpressions == 1)
        #expect(t.withAdChoices == 0)
    }

    @Test func onlyEeaAndReservationTogetherAreInTheComplianceView() {
        for (eea, reservation) in [(true, false), (false, true), (false, false)] {
            var ad = Ad()
            ad.impression(.zero, eea: eea, reservation: reservation)
            ad.add(.adchoicesImpression, .seconds(1))
            #expect(totals(ad).eeaReservationImpressions == 0)
            #expect(totals(ad).withAdChoices == 0)
        }
    }

    @Test func complianceFollowsTheCountedImpressionsFlags() {
        var ad = Ad()
        ad.impression(.zero, eea: false, reservation: false)
        ad.impression(.seconds(1), eea: true, reservation: true)  // a duplicate: its flags do not count
        #expect(totals(ad).eeaReservationImpressions == 0)
    }

    @Test func videoPlaysAndEndsCountOncePerAd() {
        var ad = Ad()
        ad.impression(.zero)
        ad.add(.videoPlay, .seconds(1))
        ad.add(.videoPause, .seconds(2))
        ad.add(.videoPlay, .seconds(3))
        ad.add(.videoEnd, .seconds(30))
        let t = totals(ad)
        #expect(t.videoPlays == 1)
        #expect(t.videoEnds == 1)
    }

    @Test func anAdThatPlayedButDidNotFinishHasAPlayAndNoEnd() {
        var ad = Ad()
        ad.add(.videoPlay, .seconds(1))
        ad.add(.videoMute, .seconds(2))
        let t = totals(ad)
        #expect(t.videoPlays == 1)
        #expect(t.videoEnds == 0)
    }
}

@Suite struct TestTrafficRules {
    @Test func anAdFlaggedTestIsLeftOutUnlessTestTrafficIsIncluded() {
        var ad = Ad()
        ad.impression(.zero, test: true)
        ad.click("MainImage", .seconds(1), test: true)
        #expect(totals(ad).impressions == 0)
        #expect(totals(ad).clicks == 0)
        #expect(totals(ad, includeTest: true).impressions == 1)
        #expect(totals(ad, includeTest: true).attributedClicks == 1)
    }

    @Test(arguments: ["/6499/example/native", "/6499/example/native-backfill",
                      "/21775744923/example/native", "/21775744923/example/native-backfill"])
    func theSDKsSampleAdUnitsAreTestTraffic(_ adUnit: String) {
        var ad = Ad()
        ad.impression(.zero, adUnit: adUnit)
        #expect(totals(ad).impressions == 0)
        #expect(totals(ad, includeTest: true).impressions == 1)
    }

    @Test func aSimilarButRealAdUnitIsNotTestTraffic() {
        var ad = Ad()
        ad.impression(.zero, adUnit: "/6499/example/native-2")
        #expect(totals(ad).impressions == 1)
    }

    @Test func aTestImpressionDoesNotAttributeARealClickWhenTestTrafficIsLeftOut() {
        var ad = Ad()
        ad.impression(.zero, test: true)
        ad.click("MainImage", .seconds(1))
        let without = totals(ad)
        let with = totals(ad, includeTest: true)
        #expect(without.clicks == 1)
        #expect(without.noImpression == 1)
        #expect(with.attributedClicks == 1)
        #expect(with.impressions == 1)
    }

    @Test func aTestImpressionDoesNotMakeTheRealOneADuplicateWhenLeftOut() {
        var ad = Ad()
        ad.impression(.zero, test: true)
        ad.impression(.seconds(1))
        #expect(totals(ad).impressions == 1)
        #expect(totals(ad).duplicateImpressions == 0)
        #expect(totals(ad, includeTest: true).duplicateImpressions == 1)
    }

    @Test func anAdWithoutTestEventsCountsTheSameEitherWay() {
        var ad = Ad()
        ad.loaded(.zero)
        ad.impression(.seconds(1))
        ad.click("MainImage", .seconds(4))
        #expect(totals(ad).format == totals(ad, includeTest: true).format)
        #expect(rowKeys(ad, .format).allSatisfy { $0.trafficClass == .plain })
    }
}

@Suite struct PurityRules {
    @Test func theContributionIsTheSameForEveryOrderOfTheEvents() {
        var ad = Ad()
        ad.loaded(.zero)
        ad.impression(.seconds(2), source: .sdk)
        ad.impression(.seconds(2), source: .app)
        ad.click("MainImage", .seconds(1))
        ad.click("MainImage", .seconds(1) + .milliseconds(300), source: .sdk)
        ad.click("Headline", .seconds(4000))
        ad.add(.adchoicesImpression, .seconds(3))
        ad.add(.videoPlay, .seconds(5))
        ad.impression(.seconds(3), test: true)
        let rules = AdContribution()
        let reference = rules.contribution(of: ad.events)
        var generator = ContributionSeed(seed: 7)
        for _ in 0..<50 {
            #expect(rules.contribution(of: ad.events.shuffled(using: &generator)) == reference)
        }
    }

    /// A state's bytes are a function of its events, in any order: a rebuilt `ad_state` equals
    /// the incremental one byte for byte.
    @Test func aStateIsStoredAsTheSameBytesForEveryOrderOfItsEvents() throws {
        var ad = Ad()
        ad.loaded(.zero)
        ad.impression(.seconds(2), source: .sdk)
        ad.impression(.seconds(2), source: .app)
        ad.click("MainImage", .seconds(1))
        ad.click("Headline", .seconds(4000))
        ad.add(.adchoicesImpression, .seconds(3))
        let reference = AdState.encode(ad.events.sorted(by: AdEvent.earlier))
        var generator = ContributionSeed(seed: 11)
        for _ in 0..<50 {
            #expect(AdState.encode(ad.events.shuffled(using: &generator)) == reference)
        }
        var strings = StringTable()
        let decoded = try #require(reference.withUnsafeBytes { AdState.decode($0, strings: &strings) })
        #expect(decoded.map(\.id) == ad.events.sorted(by: AdEvent.earlier).map(\.id))
    }

    @Test func replacingAnAdsContributionWithItsNewOneEqualsComputingFromScratch() {
        // What the projector does when a late event arrives: subtract old, add new.
        var ad = Ad()
        ad.click("MainImage", .seconds(1))
        ad.impression(.seconds(10), source: .sdk)
        let rules = AdContribution()
        var projection = rules.contribution(of: ad.events)
        let old = projection
        var late = ad
        late.impression(.zero, source: .app)
        projection.subtract(old)
        projection.add(rules.contribution(of: late.events))
        projection.removeZeros()
        #expect(projection == rules.contribution(of: late.events))
    }
}

/// A small seeded generator so shuffles repeat from run to run.
struct ContributionSeed: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

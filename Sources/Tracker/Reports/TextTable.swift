/// Columns for a terminal, two spaces apart: left-aligned, or right-aligned (numbers). The
/// reports' table and every command's listing use it.
public enum TextTable {
    public static func render(_ rows: [[String]], rightAligned: Set<Int> = []) -> String {
        guard let first = rows.first else { return "" }
        var widths = Array(repeating: 0, count: first.count)
        for row in rows {
            for (i, cell) in row.enumerated() where i < widths.count {
                widths[i] = max(widths[i], cell.count)
            }
        }
        var out = ""
        for row in rows {
            var line = ""
            for (i, cell) in row.enumerated() where i < widths.count {
                let pad = String(repeating: " ", count: widths[i] - cell.count)
                if i > 0 { line += "  " }
                line += rightAligned.contains(i) ? pad + cell : cell + pad
            }
            while line.last == " " { line.removeLast() }
            out += line + "\n"
        }
        return out
    }
}

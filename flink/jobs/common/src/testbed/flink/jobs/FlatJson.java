package testbed.flink.jobs;

import java.util.HashMap;
import java.util.Map;

/**
 * The fields of a flat JSON object whose values are strings or numbers (what the generators write):
 * a small scanner, so that the jobs parse every record as the published ones deserialise theirs,
 * without a JSON library in the job jar. Escapes in strings are not decoded (the generators write none).
 */
public final class FlatJson {
    private FlatJson() {}

    public static Map<String, String> parse(String json) {
        Map<String, String> fields = new HashMap<>();
        int i = json.indexOf('{');
        if (i < 0) {
            throw new IllegalArgumentException("not a JSON object: " + json);
        }
        i++;
        while (true) {
            i = skip(json, i);
            if (i >= json.length() || json.charAt(i) == '}') {
                return fields;
            }
            int keyEnd = json.indexOf('"', i + 1);
            String key = json.substring(i + 1, keyEnd);
            i = skip(json, json.indexOf(':', keyEnd) + 1);
            int end;
            String value;
            if (json.charAt(i) == '"') {
                end = json.indexOf('"', i + 1);
                value = json.substring(i + 1, end);
                end++;
            } else {
                end = i;
                while (end < json.length() && ",} \t\n".indexOf(json.charAt(end)) < 0) {
                    end++;
                }
                value = json.substring(i, end);
            }
            fields.put(key, value);
            i = skip(json, end);
            if (i < json.length() && json.charAt(i) == ',') {
                i++;
            }
        }
    }

    private static int skip(String s, int i) {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
            i++;
        }
        return i;
    }
}

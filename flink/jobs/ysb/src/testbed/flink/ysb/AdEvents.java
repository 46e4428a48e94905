package testbed.flink.ysb;

import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.UUID;
import testbed.flink.wordcount.RecordFactory;

/**
 * The Yahoo Streaming Benchmark's event generator: campaigns of adsPerCampaign ads each (100 x 10 in
 * the benchmark), pools of 100 users and 100 pages, and per event a user, a page, an ad, an ad type
 * and an event type (view, click or purchase) drawn uniformly, written as the benchmark's JSON with
 * event_time = the time the schedule had the event due. Event k is a function of (seed, k), so a
 * replay emits the same events; the ad -> campaign mapping is a function of the seed alone.
 */
public final class AdEvents implements RecordFactory<String> {
    private static final long serialVersionUID = 1L;
    static final String[] AD_TYPES = {"banner", "modal", "sponsored-search", "mail", "mobile"};
    static final String[] EVENT_TYPES = {"view", "click", "purchase"};
    private final long seed;
    private final String[] campaigns;
    private final String[] ads;
    private final String[] users;
    private final String[] pages;

    public AdEvents(long seed, int campaignCount, int adsPerCampaign) {
        this.seed = seed;
        SplittableRandom random = new SplittableRandom(seed);
        campaigns = ids(random, campaignCount);
        ads = ids(random, campaignCount * adsPerCampaign);
        users = ids(random, 100);
        pages = ids(random, 100);
    }

    private static String[] ids(SplittableRandom random, int n) {
        String[] out = new String[n];
        for (int i = 0; i < n; i++) {
            out[i] = new UUID(random.nextLong(), random.nextLong()).toString();
        }
        return out;
    }

    /** Ad i belongs to campaign i / adsPerCampaign: what the benchmark's setup writes to Redis. */
    public Map<String, String> campaignOfAd() {
        Map<String, String> map = new HashMap<>(ads.length * 2);
        int perCampaign = ads.length / campaigns.length;
        for (int i = 0; i < ads.length; i++) {
            map.put(ads[i], campaigns[i / perCampaign]);
        }
        return map;
    }

    @Override
    public String make(long k, long scheduledMs) {
        SplittableRandom r = new SplittableRandom(seed * 0x9E3779B97F4A7C15L + k);
        return "{\"user_id\":\"" + users[r.nextInt(users.length)]
                + "\",\"page_id\":\"" + pages[r.nextInt(pages.length)]
                + "\",\"ad_id\":\"" + ads[r.nextInt(ads.length)]
                + "\",\"ad_type\":\"" + AD_TYPES[r.nextInt(AD_TYPES.length)]
                + "\",\"event_type\":\"" + EVENT_TYPES[r.nextInt(EVENT_TYPES.length)]
                + "\",\"event_time\":\"" + scheduledMs
                + "\",\"ip_address\":\"1.2.3.4\"}";
    }
}

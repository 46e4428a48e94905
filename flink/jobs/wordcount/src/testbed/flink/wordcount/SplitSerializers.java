package testbed.flink.wordcount;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/** Checkpoint formats of the split (start, position) and of the enumerator (its unassigned splits). */
final class SplitSerializers {
    private SplitSerializers() {}

    static final class Split implements SimpleVersionedSerializer<ScheduledSplit> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(ScheduledSplit split) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(16);
            DataOutputStream out = new DataOutputStream(bytes);
            out.writeLong(split.startMs);
            out.writeLong(split.emitted);
            out.flush();
            return bytes.toByteArray();
        }

        @Override
        public ScheduledSplit deserialize(int version, byte[] data) throws IOException {
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(data));
            return new ScheduledSplit(in.readLong(), in.readLong());
        }
    }

    static final class Pending implements SimpleVersionedSerializer<List<ScheduledSplit>> {
        private final Split split = new Split();

        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(List<ScheduledSplit> splits) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            DataOutputStream out = new DataOutputStream(bytes);
            out.writeInt(splits.size());
            for (ScheduledSplit s : splits) {
                out.write(split.serialize(s));
            }
            out.flush();
            return bytes.toByteArray();
        }

        @Override
        public List<ScheduledSplit> deserialize(int version, byte[] data) throws IOException {
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(data));
            int n = in.readInt();
            List<ScheduledSplit> splits = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                splits.add(new ScheduledSplit(in.readLong(), in.readLong()));
            }
            return splits;
        }
    }
}

// Test-only broker plugin (tests/integration/test_telemetry_broker.py): a metrics reporter that is a KIP-714
// client-telemetry receiver and appends every PushTelemetry it receives to a file, one line per push:
//   <client instance id> <terminating> <content type> <base64 of the payload>
// It is loaded as a Java agent (-javaagent:reporter.jar=<output file>), which puts it on the broker's
// class path without changing how the dev broker is started; the agent argument names the output file.

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

public class HandoffTelemetryReporter implements MetricsReporter, ClientTelemetryExporterProvider {
    private static volatile String output;

    public static void premain(String args) {
        output = args;
    }

    @Override public void configure(Map<String, ?> configs) { }
    @Override public void init(List<KafkaMetric> metrics) { }
    @Override public void metricChange(KafkaMetric metric) { }
    @Override public void metricRemoval(KafkaMetric metric) { }
    @Override public void close() { }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return HandoffTelemetryReporter::write;
    }

    private static synchronized void write(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        if (output == null) {
            return;
        }
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String line = payload.clientInstanceId() + " " + payload.isTerminating() + " "
            + String.valueOf(payload.contentType()).replace(' ', '_') + " "
            + Base64.getEncoder().encodeToString(bytes) + "\n";
        try (FileOutputStream out = new FileOutputStream(output, true)) {
            out.write(line.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}

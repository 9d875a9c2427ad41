package com.batcherhq.batcher.example;

import com.batcherhq.batcher.v1.BatcherServiceGrpc;
import com.batcherhq.batcher.v1.ChatInput;
import com.batcherhq.batcher.v1.ChatMessage;
import com.batcherhq.batcher.v1.Completion;
import com.batcherhq.batcher.v1.CompletionInput;
import com.batcherhq.batcher.v1.GenerationParams;
import com.batcherhq.batcher.v1.Request;
import com.batcherhq.batcher.v1.StreamOptions;
import com.batcherhq.batcher.v1.SubmitRequest;
import com.batcherhq.batcher.v1.SubmitStreamRequest;
import com.batcherhq.batcher.v1.SubmitStreamResponse;
import com.batcherhq.batcher.v1.Verbosity;
import com.google.protobuf.Any;
import com.google.rpc.RetryInfo;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/**
 * An example client of batcher.v1.BatcherService: one Submit, a failed Submit
 * whose google.rpc.Status details are read, and a SubmitStream of several
 * requests. Usage: Example HOST:PORT. It exits 0 when every call behaved as
 * the service's contract says, and 1 otherwise.
 *
 * <p>Debian ships no grpc-services jar, so there is no Java stub of
 * grpc.health.v1.Health here; a caller that needs readiness can wait for the
 * channel's state to become READY, or make a call with a deadline.
 */
public final class Example {
  private Example() {}

  public static void main(String[] args) throws Exception {
    String target = args.length > 0 ? args[0] : "127.0.0.1:50051";
    ManagedChannel channel = NettyChannelBuilder.forTarget(target)
            .usePlaintext()
            // 1 MiB windows, fixed: no BDP pings on streams of small deltas (docs/clients.md).
            .flowControlWindow(1 << 20)
            .build();
    boolean ok;
    try {
      ok = submit(channel) && submitError(channel) && stream(channel, 10) && streamed(channel);
    } finally {
      channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
    System.out.println(ok ? "example: ok" : "example: FAILED");
    System.exit(ok ? 0 : 1);
  }

  /**
   * One chat request streamed: the blocking stub's SubmitStreamed is an
   * iterator of its deltas, then its Completion.
   */
  static boolean streamed(ManagedChannel channel) {
    Request req =
        Request.newBuilder()
            .setModel("sim-chat")
            .setChat(
                ChatInput.newBuilder()
                    .addMessages(ChatMessage.newBuilder().setRole("user").setContent("Stream")))
            .setParams(GenerationParams.newBuilder().setMaxTokens(8))
            .build();
    java.util.Iterator<com.batcherhq.batcher.v1.SubmitStreamedResponse> it =
        BatcherServiceGrpc.newBlockingStub(channel)
            .withDeadlineAfter(30, TimeUnit.SECONDS)
            .submitStreamed(com.batcherhq.batcher.v1.SubmitStreamedRequest.newBuilder().setRequest(req).build());
    StringBuilder text = new StringBuilder();
    int deltas = 0;
    Completion c = null;
    System.out.print("streamed: ");
    while (it.hasNext()) {
      com.batcherhq.batcher.v1.SubmitStreamedResponse m = it.next();
      if (m.hasDelta()) {
        System.out.print(m.getDelta().getText());
        System.out.flush();
        text.append(m.getDelta().getText());
        deltas++;
      } else if (m.hasCompletion()) {
        c = m.getCompletion();
      }
    }
    System.out.printf(" (%d deltas)%n", deltas);
    return c != null && deltas > 1 && text.toString().equals(c.getText()) && !c.hasError();
  }

  /** One chat request, blocking. */
  static boolean submit(ManagedChannel channel) {
    Request req =
        Request.newBuilder()
            .setModel("sim-chat")
            .setChat(
                ChatInput.newBuilder()
                    .addMessages(ChatMessage.newBuilder().setRole("user").setContent("Hello")))
            .setParams(GenerationParams.newBuilder().setMaxTokens(8))
            .build();
    Completion c =
        BatcherServiceGrpc.newBlockingStub(channel)
            .withDeadlineAfter(30, TimeUnit.SECONDS)
            .submit(SubmitRequest.newBuilder().setRequest(req).build())
            .getCompletion();
    System.out.printf("submit: %s (%d tokens)%n", c.getText(), c.getUsage().getTotalTokens());
    return !c.getText().isEmpty() && !c.hasError();
  }

  /** A request for an unknown model: INVALID_ARGUMENT naming the field. */
  static boolean submitError(ManagedChannel channel) {
    Request req =
        Request.newBuilder()
            .setModel("no-such-model")
            .setCompletion(CompletionInput.newBuilder().setPrompt("x"))
            .build();
    try {
      BatcherServiceGrpc.newBlockingStub(channel)
          .withDeadlineAfter(30, TimeUnit.SECONDS)
          .submit(SubmitRequest.newBuilder().setRequest(req).build());
      System.out.println("submit error: none");
      return false;
    } catch (StatusRuntimeException e) {
      com.google.rpc.Status st = StatusProto.fromThrowable(e);
      System.out.printf(
          "submit error: %s: %s%n", e.getStatus().getCode(), e.getStatus().getDescription());
      if (st != null) {
        for (Any d : st.getDetailsList()) {
          if (d.is(RetryInfo.class)) {
            try {
              System.out.println("  retry after " + d.unpack(RetryInfo.class).getRetryDelay());
            } catch (com.google.protobuf.InvalidProtocolBufferException ex) {
              throw new IllegalStateException(ex);
            }
          }
        }
      }
      return e.getStatus().getCode() == io.grpc.Status.Code.INVALID_ARGUMENT
          && e.getStatus().getDescription().contains("model");
    }
  }

  /** n requests over one SubmitStream; every one must be answered once. */
  static boolean stream(ManagedChannel channel, int n) throws InterruptedException {
    CountDownLatch done = new CountDownLatch(1);
    AtomicReference<Throwable> failure = new AtomicReference<>();
    Set<String> answered = new HashSet<>();
    int[] events = {0};
    StreamObserver<SubmitStreamRequest> out =
        BatcherServiceGrpc.newStub(channel)
            .withDeadlineAfter(60, TimeUnit.SECONDS)
            .submitStream(
                new StreamObserver<SubmitStreamResponse>() {
                  @Override
                  public void onNext(SubmitStreamResponse r) {
                    switch (r.getKindCase()) {
                      case COMPLETION:
                        Completion c = r.getCompletion();
                        synchronized (answered) {
                          if (!answered.add(c.getId()) || c.hasError()) {
                            failure.compareAndSet(null, new IllegalStateException("bad: " + c));
                          }
                        }
                        System.out.printf("stream: %s -> %s%n", c.getId(), c.getText());
                        break;
                      case EVENT:
                        events[0]++;
                        break;
                      case REJECTION:
                        failure.compareAndSet(
                            null, new IllegalStateException("rejected: " + r.getRejection()));
                        break;
                      case SUMMARY:
                        if (r.getSummary().getFinal()) {
                          System.out.printf(
                              "stream: final summary: %d completed%n",
                              r.getSummary().getCompleted());
                        }
                        break;
                      default:
                        break;
                    }
                  }

                  @Override
                  public void onError(Throwable t) {
                    failure.compareAndSet(null, t);
                    done.countDown();
                  }

                  @Override
                  public void onCompleted() {
                    done.countDown();
                  }
                });
    out.onNext(
        SubmitStreamRequest.newBuilder()
            .setOptions(StreamOptions.newBuilder().setVerbosity(Verbosity.VERBOSITY_ALL))
            .build());
    for (int i = 0; i < n; i++) {
      out.onNext(
          SubmitStreamRequest.newBuilder()
              .setRequest(
                  Request.newBuilder()
                      .setId("r" + i)
                      .setModel("sim-completion")
                      .setCompletion(CompletionInput.newBuilder().setPrompt("Prompt " + i))
                      .setParams(GenerationParams.newBuilder().setMaxTokens(4)))
              .build());
    }
    out.onCompleted();
    if (!done.await(60, TimeUnit.SECONDS)) {
      System.out.println("stream: timed out");
      return false;
    }
    if (failure.get() != null) {
      System.out.println("stream: " + failure.get());
      return false;
    }
    System.out.printf("stream: %d answered, %d events%n", answered.size(), events[0]);
    return answered.size() == n && events[0] > 0;
  }
}

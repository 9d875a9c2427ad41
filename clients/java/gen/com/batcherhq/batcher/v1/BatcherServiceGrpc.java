package com.batcherhq.batcher.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * BatcherService groups compatible model requests into batches, sends them to
 * providers within each provider's limits, and returns every request's result.
 * Every request the service accepts ends with exactly one terminal result: a
 * Completion whose output is set, or a Completion whose error is set.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: batcher/v1/batcher.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class BatcherServiceGrpc {

  private BatcherServiceGrpc() {}

  public static final String SERVICE_NAME = "batcher.v1.BatcherService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitRequest,
      com.batcherhq.batcher.v1.SubmitResponse> getSubmitMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Submit",
      requestType = com.batcherhq.batcher.v1.SubmitRequest.class,
      responseType = com.batcherhq.batcher.v1.SubmitResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitRequest,
      com.batcherhq.batcher.v1.SubmitResponse> getSubmitMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitRequest, com.batcherhq.batcher.v1.SubmitResponse> getSubmitMethod;
    if ((getSubmitMethod = BatcherServiceGrpc.getSubmitMethod) == null) {
      synchronized (BatcherServiceGrpc.class) {
        if ((getSubmitMethod = BatcherServiceGrpc.getSubmitMethod) == null) {
          BatcherServiceGrpc.getSubmitMethod = getSubmitMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.SubmitRequest, com.batcherhq.batcher.v1.SubmitResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Submit"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.SubmitRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.SubmitResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BatcherServiceMethodDescriptorSupplier("Submit"))
              .build();
        }
      }
    }
    return getSubmitMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitStreamRequest,
      com.batcherhq.batcher.v1.SubmitStreamResponse> getSubmitStreamMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SubmitStream",
      requestType = com.batcherhq.batcher.v1.SubmitStreamRequest.class,
      responseType = com.batcherhq.batcher.v1.SubmitStreamResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitStreamRequest,
      com.batcherhq.batcher.v1.SubmitStreamResponse> getSubmitStreamMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitStreamRequest, com.batcherhq.batcher.v1.SubmitStreamResponse> getSubmitStreamMethod;
    if ((getSubmitStreamMethod = BatcherServiceGrpc.getSubmitStreamMethod) == null) {
      synchronized (BatcherServiceGrpc.class) {
        if ((getSubmitStreamMethod = BatcherServiceGrpc.getSubmitStreamMethod) == null) {
          BatcherServiceGrpc.getSubmitStreamMethod = getSubmitStreamMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.SubmitStreamRequest, com.batcherhq.batcher.v1.SubmitStreamResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SubmitStream"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.SubmitStreamRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.SubmitStreamResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BatcherServiceMethodDescriptorSupplier("SubmitStream"))
              .build();
        }
      }
    }
    return getSubmitStreamMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitStreamedRequest,
      com.batcherhq.batcher.v1.SubmitStreamedResponse> getSubmitStreamedMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "SubmitStreamed",
      requestType = com.batcherhq.batcher.v1.SubmitStreamedRequest.class,
      responseType = com.batcherhq.batcher.v1.SubmitStreamedResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitStreamedRequest,
      com.batcherhq.batcher.v1.SubmitStreamedResponse> getSubmitStreamedMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.SubmitStreamedRequest, com.batcherhq.batcher.v1.SubmitStreamedResponse> getSubmitStreamedMethod;
    if ((getSubmitStreamedMethod = BatcherServiceGrpc.getSubmitStreamedMethod) == null) {
      synchronized (BatcherServiceGrpc.class) {
        if ((getSubmitStreamedMethod = BatcherServiceGrpc.getSubmitStreamedMethod) == null) {
          BatcherServiceGrpc.getSubmitStreamedMethod = getSubmitStreamedMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.SubmitStreamedRequest, com.batcherhq.batcher.v1.SubmitStreamedResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "SubmitStreamed"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.SubmitStreamedRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.SubmitStreamedResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BatcherServiceMethodDescriptorSupplier("SubmitStreamed"))
              .build();
        }
      }
    }
    return getSubmitStreamedMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static BatcherServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<BatcherServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<BatcherServiceStub>() {
        @java.lang.Override
        public BatcherServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new BatcherServiceStub(channel, callOptions);
        }
      };
    return BatcherServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static BatcherServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<BatcherServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<BatcherServiceBlockingStub>() {
        @java.lang.Override
        public BatcherServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new BatcherServiceBlockingStub(channel, callOptions);
        }
      };
    return BatcherServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static BatcherServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<BatcherServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<BatcherServiceFutureStub>() {
        @java.lang.Override
        public BatcherServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new BatcherServiceFutureStub(channel, callOptions);
        }
      };
    return BatcherServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * BatcherService groups compatible model requests into batches, sends them to
   * providers within each provider's limits, and returns every request's result.
   * Every request the service accepts ends with exactly one terminal result: a
   * Completion whose output is set, or a Completion whose error is set.
   * </pre>
   */
  public static abstract class BatcherServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Submit sends one request and returns when it completes.
     * A failure is returned as the RPC's status: INVALID_ARGUMENT for bad input
     * (the message names the field), RESOURCE_EXHAUSTED with RetryInfo when the
     * queue is full, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE during shutdown or
     * when no backend is healthy, and the translated class of an upstream error.
     * </pre>
     */
    public void submit(com.batcherhq.batcher.v1.SubmitRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSubmitMethod(), responseObserver);
    }

    /**
     * <pre>
     * SubmitStream multiplexes many requests over one bidirectional stream.
     * The first message may be StreamOptions; every later message is a Request,
     * a Cancel or a Flush. The server answers, interleaved and as they happen,
     * with progress events, terminal completions, rejections of requests it did
     * not accept, and periodic summaries. When the caller half-closes, the server
     * finishes every accepted request, sends a last summary and ends the stream
     * with OK.
     * A bad request, one carrying a field its type does not declare included, is
     * refused alone: a Rejection with its id and a status naming the field, while
     * the stream and its other requests go on. Only a message that does not
     * decode at all, or StreamOptions the server cannot honour, ends the stream
     * with INVALID_ARGUMENT.
     * Each stream has a bounded in-flight window: while it is full the server
     * stops reading the stream, so gRPC flow control pushes back on the caller
     * instead of requests failing.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamRequest> submitStream(
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getSubmitStreamMethod(), responseObserver);
    }

    /**
     * <pre>
     * SubmitStreamed sends one request and streams its answer back: its
     * deltas as the model generates them, then its terminal Completion, which
     * holds the whole answer. The request is streamed whether or not its
     * stream field is set.
     * A request refused before admission ends the RPC with its status, as
     * Submit does. An admitted request that fails gets its Completion with
     * the error set (and partial set when deltas had been sent), and the RPC
     * then ends with the same status.
     * </pre>
     */
    public void submitStreamed(com.batcherhq.batcher.v1.SubmitStreamedRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamedResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSubmitStreamedMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getSubmitMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.SubmitRequest,
                com.batcherhq.batcher.v1.SubmitResponse>(
                  this, METHODID_SUBMIT)))
          .addMethod(
            getSubmitStreamMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.SubmitStreamRequest,
                com.batcherhq.batcher.v1.SubmitStreamResponse>(
                  this, METHODID_SUBMIT_STREAM)))
          .addMethod(
            getSubmitStreamedMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.SubmitStreamedRequest,
                com.batcherhq.batcher.v1.SubmitStreamedResponse>(
                  this, METHODID_SUBMIT_STREAMED)))
          .build();
    }
  }

  /**
   * <pre>
   * BatcherService groups compatible model requests into batches, sends them to
   * providers within each provider's limits, and returns every request's result.
   * Every request the service accepts ends with exactly one terminal result: a
   * Completion whose output is set, or a Completion whose error is set.
   * </pre>
   */
  public static final class BatcherServiceStub extends io.grpc.stub.AbstractAsyncStub<BatcherServiceStub> {
    private BatcherServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected BatcherServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new BatcherServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Submit sends one request and returns when it completes.
     * A failure is returned as the RPC's status: INVALID_ARGUMENT for bad input
     * (the message names the field), RESOURCE_EXHAUSTED with RetryInfo when the
     * queue is full, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE during shutdown or
     * when no backend is healthy, and the translated class of an upstream error.
     * </pre>
     */
    public void submit(com.batcherhq.batcher.v1.SubmitRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSubmitMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * SubmitStream multiplexes many requests over one bidirectional stream.
     * The first message may be StreamOptions; every later message is a Request,
     * a Cancel or a Flush. The server answers, interleaved and as they happen,
     * with progress events, terminal completions, rejections of requests it did
     * not accept, and periodic summaries. When the caller half-closes, the server
     * finishes every accepted request, sends a last summary and ends the stream
     * with OK.
     * A bad request, one carrying a field its type does not declare included, is
     * refused alone: a Rejection with its id and a status naming the field, while
     * the stream and its other requests go on. Only a message that does not
     * decode at all, or StreamOptions the server cannot honour, ends the stream
     * with INVALID_ARGUMENT.
     * Each stream has a bounded in-flight window: while it is full the server
     * stops reading the stream, so gRPC flow control pushes back on the caller
     * instead of requests failing.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamRequest> submitStream(
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getSubmitStreamMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * SubmitStreamed sends one request and streams its answer back: its
     * deltas as the model generates them, then its terminal Completion, which
     * holds the whole answer. The request is streamed whether or not its
     * stream field is set.
     * A request refused before admission ends the RPC with its status, as
     * Submit does. An admitted request that fails gets its Completion with
     * the error set (and partial set when deltas had been sent), and the RPC
     * then ends with the same status.
     * </pre>
     */
    public void submitStreamed(com.batcherhq.batcher.v1.SubmitStreamedRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamedResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getSubmitStreamedMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * BatcherService groups compatible model requests into batches, sends them to
   * providers within each provider's limits, and returns every request's result.
   * Every request the service accepts ends with exactly one terminal result: a
   * Completion whose output is set, or a Completion whose error is set.
   * </pre>
   */
  public static final class BatcherServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<BatcherServiceBlockingStub> {
    private BatcherServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected BatcherServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new BatcherServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Submit sends one request and returns when it completes.
     * A failure is returned as the RPC's status: INVALID_ARGUMENT for bad input
     * (the message names the field), RESOURCE_EXHAUSTED with RetryInfo when the
     * queue is full, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE during shutdown or
     * when no backend is healthy, and the translated class of an upstream error.
     * </pre>
     */
    public com.batcherhq.batcher.v1.SubmitResponse submit(com.batcherhq.batcher.v1.SubmitRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSubmitMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * SubmitStreamed sends one request and streams its answer back: its
     * deltas as the model generates them, then its terminal Completion, which
     * holds the whole answer. The request is streamed whether or not its
     * stream field is set.
     * A request refused before admission ends the RPC with its status, as
     * Submit does. An admitted request that fails gets its Completion with
     * the error set (and partial set when deltas had been sent), and the RPC
     * then ends with the same status.
     * </pre>
     */
    public java.util.Iterator<com.batcherhq.batcher.v1.SubmitStreamedResponse> submitStreamed(
        com.batcherhq.batcher.v1.SubmitStreamedRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getSubmitStreamedMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * BatcherService groups compatible model requests into batches, sends them to
   * providers within each provider's limits, and returns every request's result.
   * Every request the service accepts ends with exactly one terminal result: a
   * Completion whose output is set, or a Completion whose error is set.
   * </pre>
   */
  public static final class BatcherServiceFutureStub extends io.grpc.stub.AbstractFutureStub<BatcherServiceFutureStub> {
    private BatcherServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected BatcherServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new BatcherServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Submit sends one request and returns when it completes.
     * A failure is returned as the RPC's status: INVALID_ARGUMENT for bad input
     * (the message names the field), RESOURCE_EXHAUSTED with RetryInfo when the
     * queue is full, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE during shutdown or
     * when no backend is healthy, and the translated class of an upstream error.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.batcherhq.batcher.v1.SubmitResponse> submit(
        com.batcherhq.batcher.v1.SubmitRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSubmitMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_SUBMIT = 0;
  private static final int METHODID_SUBMIT_STREAMED = 1;
  private static final int METHODID_SUBMIT_STREAM = 2;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final BatcherServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(BatcherServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_SUBMIT:
          serviceImpl.submit((com.batcherhq.batcher.v1.SubmitRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitResponse>) responseObserver);
          break;
        case METHODID_SUBMIT_STREAMED:
          serviceImpl.submitStreamed((com.batcherhq.batcher.v1.SubmitStreamedRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamedResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_SUBMIT_STREAM:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.submitStream(
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.SubmitStreamResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class BatcherServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    BatcherServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return com.batcherhq.batcher.v1.BatcherProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("BatcherService");
    }
  }

  private static final class BatcherServiceFileDescriptorSupplier
      extends BatcherServiceBaseDescriptorSupplier {
    BatcherServiceFileDescriptorSupplier() {}
  }

  private static final class BatcherServiceMethodDescriptorSupplier
      extends BatcherServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    BatcherServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (BatcherServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new BatcherServiceFileDescriptorSupplier())
              .addMethod(getSubmitMethod())
              .addMethod(getSubmitStreamMethod())
              .addMethod(getSubmitStreamedMethod())
              .build();
        }
      }
    }
    return result;
  }
}
